// Every program and dlion subcommand answers --help with a man-style page,
// --version with "NAME VERSION", and an unknown option with a clear error.
#include <dlion_version.h>
#include <QProcess>
#include <QTest>

namespace {

struct Result {
    int code = -1;
    QString out, err;
};

Result runProgram(const QString &program, const QStringList &args)
{
    QProcess p;
    p.start(program, args);
    if (!p.waitForFinished(60000))
        p.kill();
    p.waitForFinished(5000);
    return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1, QString::fromUtf8(p.readAllStandardOutput()),
            QString::fromUtf8(p.readAllStandardError())};
}

struct Row {
    QString program;
    QStringList command; // the subcommand, if any
    QString name;        // as NAME and the error prefix give it
};

Row currentRow()
{
    QFETCH(QString, program);
    QFETCH(QStringList, command);
    QFETCH(QString, name);
    return {program, command, name};
}

Result runRow(const Row &row, const QString &option)
{
    return runProgram(row.program, row.command + QStringList{option});
}

} // namespace

class TstCommandLine : public QObject {
    Q_OBJECT

    void addCommands()
    {
        QTest::addColumn<QString>("program");
        QTest::addColumn<QStringList>("command");
        QTest::addColumn<QString>("name");
        const QString cli = qEnvironmentVariable("DLION_CLI");
        QTest::newRow("dlion") << cli << QStringList() << "dlion";
        QStringList subcommands = {"run", "attach", "deploy", "stop", "knobs", "runs", "tag", "note"};
#ifdef DLION_HAVE_REPORTS
        subcommands << "report" << "compare";
#endif
        for (const QString &sub : std::as_const(subcommands))
            QTest::newRow(qPrintable(sub)) << cli << QStringList{sub} << QStringLiteral("dlion %1").arg(sub);
        QTest::newRow("dlion-agent") << qEnvironmentVariable("DLION_AGENT") << QStringList() << "dlion-agent";
#ifdef DLION_STUDIO
        QTest::newRow("dlion-studio") << QStringLiteral(DLION_STUDIO) << QStringList() << "dlion-studio";
#endif
    }

private Q_SLOTS:
    void help_data() { addCommands(); }
    void help()
    {
        const Row row = currentRow();
        const Result r = runRow(row, QStringLiteral("--help"));
        QCOMPARE(r.code, 0);
        QVERIFY2(r.out.startsWith(QStringLiteral("NAME\n    %1 - ").arg(row.name)), qPrintable(r.out.left(200)));
        qsizetype at = 0;
        for (const char *section : {"SYNOPSIS", "DESCRIPTION", "OPTIONS", "EXAMPLES", "EXIT STATUS"}) {
            const qsizetype next = r.out.indexOf(QStringLiteral("\n%1\n    ").arg(QLatin1String(section)), at);
            QVERIFY2(next > at, section); // present, in this order, not empty
            at = next;
        }
        QVERIFY(r.out.contains(QStringLiteral("--version")));
        QVERIFY2(r.out.contains(QStringLiteral("\n    ") + row.name), "an example or the synopsis names the command");
    }

    void version_data() { addCommands(); }
    void version()
    {
        const Row row = currentRow();
        const Result r = runRow(row, QStringLiteral("--version"));
        QCOMPARE(r.code, 0);
        QCOMPARE(r.out, QStringLiteral("%1 %2\n").arg(row.name.section(QLatin1Char(' '), 0, 0), QStringLiteral(DLION_VERSION_FULL)));
    }

    void unknownOption_data() { addCommands(); }
    void unknownOption()
    {
        const Row row = currentRow();
        const Result r = runRow(row, QStringLiteral("--no-such-option"));
        QCOMPARE(r.code, 2);
        QVERIFY(r.out.isEmpty());
        QVERIFY2(r.err.contains(QStringLiteral("%1: Unknown option 'no-such-option'.\nTry '%1 --help'.").arg(row.name)),
                 qPrintable(r.err));
    }

    void noCommand()
    {
        const Result r = runProgram(qEnvironmentVariable("DLION_CLI"), {});
        QCOMPARE(r.code, 2);
        QVERIFY(r.err.startsWith(QStringLiteral("dlion: give a command\n\nNAME\n")));
    }
};

QTEST_GUILESS_MAIN(TstCommandLine)
#include "tst_command_line.moc"
