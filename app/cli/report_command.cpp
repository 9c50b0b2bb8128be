#include "report_command.h"

#include "store_access.h"

#include <dlion_version.h>
#include <report_writer.h>
#include <run_comparison.h>
#include <safe_file.h>

#include <QApplication>
#include <QFile>
#include <QFileInfo>
#include <QJsonDocument>

#include <QDir>

#include <cstring>
#include <unistd.h>

namespace dlion::cli {

int reportCommand(const QStringList &args)
{
    const cmdline::Page page{
        QStringLiteral("dlion report"), QStringLiteral("write a report of a recorded run"),
        QStringLiteral("dlion report RUN [--format html|pdf|csv|json] [-o PATH]"),
        QStringLiteral(
        "Writes a report of a recorded run (RUN: a run id from 'dlion runs', or 'last'):\n"
        "  html  one self-contained file (plots inline): summary, metrics, accuracy and loss vs\n"
        "        time and step, compute shares, link bandwidth and gradient priority heatmaps, merges\n"
        "  pdf   the same, paged (A4)\n"
        "  csv   a folder: rounds.csv, links.csv, evals.csv, merges.csv, summary.csv\n"
        "  json  the run's summary.json with every series, plus its stored metadata\n"
        "Without --format the extension of -o decides (default html). '-o -' prints json to stdout."),
        {QStringLiteral("dlion report last -o dlion-report.html"), QStringLiteral("dlion report 3 --format csv -o run3"),
         QStringLiteral("dlion report last -o - | jq .final_accuracy")},
        QStringLiteral("0 success, 1 failure (store, output path), 2 bad usage or unknown run id.")};
    QCommandLineParser parser;
    addStoreOption(parser);
    parser.addOption({"format", "html, pdf, csv or json.", "FORMAT"});
    parser.addOption({{"o", "output"}, "Output file (csv: a folder; default run-ID.html etc. here).", "PATH"});
    parser.addPositionalArgument("RUN", "Run id (see 'dlion runs'), or 'last'.");
    int code = 0;
    if (!cmdline::parse(page, parser, args, &code))
        return code;
    const QStringList pos = parser.positionalArguments();
    if (pos.size() != 1) {
        stdErr() << "dlion report: give exactly one run id (see 'dlion runs')\n";
        return 2;
    }
    QString formatName = parser.value("format");
    const QString output = parser.value("output");
    if (formatName.isEmpty()) {
        const QString suffix = QFileInfo(output).suffix().toLower();
        formatName = output == QLatin1String("-") ? QStringLiteral("json")
                     : report::parseFormat(suffix)  ? suffix
                                                    : QStringLiteral("html");
    }
    const auto format = report::parseFormat(formatName);
    if (!format) {
        stdErr() << "dlion report: --format \"" << formatName << "\" is not one of html, pdf, csv, json\n";
        return 2;
    }
    if (output == QLatin1String("-") && (*format == report::Format::Html || *format == report::Format::Pdf)) {
        stdErr() << "dlion report: '-o -' works for json and csv only; give a file for " << formatName << "\n";
        return 2;
    }
    core::RunStore store;
    if (!openStore(QStringLiteral("report"), parser, core::RunStore::Mode::ReadOnly, store, &code))
        return code;
    const auto id = resolveRun(QStringLiteral("report"), store, pos[0], &code);
    if (!id)
        return code;
    const auto run = store.loadRun(*id);
    if (!run) {
        stdErr() << "dlion report: " << store.errorString() << "\n";
        return 1;
    }
    const QString path = output.isEmpty() ? report::defaultOutputName(*id, *format) : output;
    const report::Result result = report::writeReport(*run, *format, path);
    if (!result.ok) {
        stdErr() << "dlion report: " << result.error << "\n";
        return 1;
    }
    if (path != QLatin1String("-")) {
        stdOut() << "wrote " << QFileInfo(path).absoluteFilePath();
        if (result.pages > 0)
            stdOut() << " (" << result.pages << " pages)";
        else if (result.files.size() > 1)
            stdOut() << " (" << result.files.size() << " files)";
        stdOut() << "\n";
    }
    return 0;
}

namespace {

struct ComparedRuns {
    QList<qint64> ids;  // the baseline first, when one is given
    qint64 baseline = 0;
    QList<core::StoredRun> runs;
};

// The runs named on the command line; nullopt after naming the problem, with *code set.
std::optional<ComparedRuns> loadCompared(const QCommandLineParser &parser, core::RunStore &store, int *code)
{
    ComparedRuns out;
    for (const QString &text : parser.positionalArguments()) {
        const auto id = resolveRun(QStringLiteral("compare"), store, text, code);
        if (!id)
            return std::nullopt;
        if (!out.ids.contains(*id))
            out.ids << *id;
    }
    if (parser.isSet("baseline")) {
        const auto id = resolveRun(QStringLiteral("compare"), store, parser.value("baseline"), code);
        if (!id)
            return std::nullopt;
        out.baseline = *id;
        if (!out.ids.contains(out.baseline))
            out.ids.prepend(out.baseline);
    }
    for (qint64 id : std::as_const(out.ids)) {
        auto run = store.loadRun(id);
        if (!run) {
            stdErr() << "dlion compare: " << store.errorString() << "\n";
            *code = 1;
            return std::nullopt;
        }
        out.runs.append(std::move(*run));
    }
    return out;
}

// Writes the comparison as `format` to `output` (empty or "-": standard
// output; for html, compare-IDS.html); returns the exit code.
int writeComparison(const report::Comparison &c, const QList<qint64> &ids, const QString &format, QString output)
{
    if (format == QLatin1String("html")) {
        if (output.isEmpty()) {
            QStringList parts;
            for (qint64 id : ids)
                parts << QString::number(id);
            output = QStringLiteral("compare-%1.html").arg(parts.join(QLatin1Char('-')));
        }
        QString error;
        if (!report::writeComparisonHtml(c, output, &error)) {
            stdErr() << "dlion compare: " << error << "\n";
            return 1;
        }
        stdOut() << "wrote " << QFileInfo(output).absoluteFilePath() << "\n";
        return 0;
    }
    const QByteArray text = format == QLatin1String("json") ? QJsonDocument(c.toJson()).toJson(QJsonDocument::Indented)
                                                            : c.toText().toUtf8();
    if (output.isEmpty() || output == QLatin1String("-")) {
        stdOut() << QString::fromUtf8(text);
        return 0;
    }
    if (QString error; !files::writeAtomically(QFileInfo(output).absoluteFilePath(), text, &error)) {
        stdErr() << "dlion compare: " << error << "\n";
        return 1;
    }
    stdOut() << "wrote " << QFileInfo(output).absoluteFilePath() << "\n";
    return 0;
}

} // namespace

int compareCommand(const QStringList &args)
{
    const cmdline::Page page{
        QStringLiteral("dlion compare"), QStringLiteral("compare recorded runs"),
        QStringLiteral("dlion compare RUN RUN... [--baseline RUN] [--target A] [--budget S] [--format text|json|html] [-o PATH]"),
        QStringLiteral("Compares recorded runs: time to 80%, 85% and the target accuracy, accuracy at a\n"
                       "training-time budget, bytes sent, samples/s and speedup over a baseline run."),
        {QStringLiteral("dlion compare 1 2 3 --target 0.85"), QStringLiteral("dlion compare 1 2 --format html -o compare.html")},
        QStringLiteral("0 success, 1 failure (store, output path), 2 bad usage or unknown run id.")};
    QCommandLineParser parser;
    addStoreOption(parser);
    parser.addOption({"baseline", "The run speedups are measured against (default: the first).", "RUN"});
    parser.addOption({"target", "Target accuracy, 0-1 (default: the runs' own target, else 0.80).", "A"});
    parser.addOption({"budget", "Training-time budget in seconds (default: the shortest run).", "S"});
    parser.addOption({"format", "text, json or html (html: overlaid accuracy curves and the table).", "FORMAT"});
    parser.addOption({{"o", "output"}, "Write to PATH instead of standard output (html: default compare-IDS.html).", "PATH"});
    parser.addPositionalArgument("RUN", "Two or more run ids (see 'dlion runs').", "RUN RUN...");
    int code = 0;
    if (!cmdline::parse(page, parser, args, &code))
        return code;
    const QStringList pos = parser.positionalArguments();
    const QString format = parser.value("format").isEmpty() ? QStringLiteral("text") : parser.value("format");
    if (format != QLatin1String("text") && format != QLatin1String("json") && format != QLatin1String("html")) {
        stdErr() << "dlion compare: --format \"" << format << "\" is not one of text, json, html\n";
        return 2;
    }
    auto number = [&](const char *name, double lo, double hi, double *out) {
        if (!parser.isSet(name))
            return true;
        bool ok = false;
        *out = parser.value(name).toDouble(&ok);
        if (!ok || *out < lo || *out > hi) {
            stdErr() << "dlion compare: --" << name << " \"" << parser.value(name) << "\" must be a number in [" << lo
                     << ", " << hi << "]\n";
            return false;
        }
        return true;
    };
    double target = 0, budget = 0;
    if (!number("target", 0.0, 1.0, &target) || !number("budget", 0.0, 1e9, &budget))
        return 2;
    if (pos.size() + (parser.isSet("baseline") ? 1 : 0) < 2) {
        stdErr() << "dlion compare: give at least two run ids (see 'dlion runs')\n";
        return 2;
    }
    core::RunStore store;
    if (!openStore(QStringLiteral("compare"), parser, core::RunStore::Mode::ReadOnly, store, &code))
        return code;
    std::optional<ComparedRuns> compared = loadCompared(parser, store, &code);
    if (!compared)
        return code;
    const report::Comparison c = report::Comparison::build(compared->runs, compared->baseline, target, budget);
    return writeComparison(c, compared->ids, format, parser.value("output"));
}

bool isPlottingCommand(const char *command)
{
    return std::strcmp(command, "report") == 0 || std::strcmp(command, "compare") == 0;
}

int runPlottingCommand(int argc, char **argv)
{
    if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM"))
        qputenv("QT_QPA_PLATFORM", "offscreen");
    if (qEnvironmentVariableIsEmpty("XDG_RUNTIME_DIR")) {
        // What Qt would pick, made quietly (it warns when it has to).
        const QByteArray dir = "/tmp/runtime-" + QByteArray::number(::getuid());
        if (QDir().mkpath(QString::fromLocal8Bit(dir))) {
            QFile::setPermissions(QString::fromLocal8Bit(dir), QFile::ReadOwner | QFile::WriteOwner | QFile::ExeOwner);
            qputenv("XDG_RUNTIME_DIR", dir);
        }
    }
    QApplication app(argc, argv);
    QCoreApplication::setApplicationName(QStringLiteral("dlion"));
    QCoreApplication::setApplicationVersion(QStringLiteral(DLION_VERSION_FULL));
    QStringList args = app.arguments();
    const QString command = args.takeAt(1);
    return command == QLatin1String("report") ? reportCommand(args) : compareCommand(args);
}

} // namespace dlion::cli
