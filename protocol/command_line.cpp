#include "command_line.h"

#include <QCoreApplication>
#include <QTextStream>

namespace dlion::cmdline {

namespace {

QString indented(const QString &text)
{
    QStringList lines = text.split(QLatin1Char('\n'));
    for (QString &line : lines)
        if (!line.isEmpty())
            line.prepend(QStringLiteral("    "));
    return lines.join(QLatin1Char('\n'));
}

} // namespace

QString manText(const Page &page, const QCommandLineParser &parser)
{
    // helpText() is "Usage: ...\nDESCRIPTION\n\nOptions:\n  -h, ..."; keep the options on.
    const QString help = parser.helpText();
    const QLatin1String header("Options:\n");
    const qsizetype options = help.indexOf(header);
    QString optionLines = options < 0 ? QString() : help.mid(options + header.size());
    while (optionLines.endsWith(QLatin1Char('\n')))
        optionLines.chop(1);
    QString text;
    QTextStream s(&text);
    s << "NAME\n" << indented(page.name + QStringLiteral(" - ") + page.summary) << "\n\n"
      << "SYNOPSIS\n" << indented(page.synopsis) << "\n\n"
      << "DESCRIPTION\n" << indented(page.description) << "\n\n"
      << "OPTIONS\n" << indented(optionLines) << "\n\n";
    if (!page.examples.isEmpty())
        s << "EXAMPLES\n" << indented(page.examples.join(QLatin1Char('\n'))) << "\n\n";
    s << "EXIT STATUS\n" << indented(page.exitStatus) << "\n";
    return text;
}

bool parse(const Page &page, QCommandLineParser &parser, const QStringList &args, int *exitCode)
{
    parser.addOption({{QStringLiteral("h"), QStringLiteral("help")}, QStringLiteral("Show this help and exit.")});
    parser.addOption({QStringLiteral("version"), QStringLiteral("Show the version and exit.")});
    QTextStream out(stdout), err(stderr);
    if (!parser.parse(args)) {
        err << page.name << ": " << parser.errorText() << "\nTry '" << page.name << " --help'.\n";
        *exitCode = 2;
        return false;
    }
    if (parser.isSet(QStringLiteral("help"))) {
        out << manText(page, parser);
        *exitCode = 0;
        return false;
    }
    if (parser.isSet(QStringLiteral("version"))) {
        out << QCoreApplication::applicationName() << ' ' << QCoreApplication::applicationVersion() << '\n';
        *exitCode = 0;
        return false;
    }
    return true;
}

} // namespace dlion::cmdline
