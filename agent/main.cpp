// dlion-agent: one per node. Listens for an authenticated controller, runs
// the training worker it is given, streams telemetry back.
#include "agent_log.h"
#include "allocator_thresholds.h"
#include "agent_server.h"
#include "library_pages.h"

#include <command_line.h>
#include <dlion_version.h>
#include <handshake.h>
#include <safe_file.h>
#include <trainer.h>

#include <QCommandLineParser>
#include <QCoreApplication>
#include <QFile>
#include <QTextStream>

#include <sys/prctl.h>

#include <csignal>
#include <cstdio>

namespace {

int fail(const QString &message, int code = 2)
{
    QTextStream(stderr) << "dlion-agent: " << message << "\n";
    return code;
}

// --export-checkpoint: the torch side of `dlion export --checkpoint`.
int exportCheckpoint(const QCommandLineParser &parser)
{
    const QString output = parser.value("output");
    if (output.isEmpty())
        return fail(QStringLiteral("--export-checkpoint needs --output FILE"));
    dlion::protocol::JobSpec spec;
    spec.dataset = parser.value("dataset");
    spec.dataDir = parser.value("data-dir");
    try {
        const std::string bytes = dlion::engine::exportCheckpoint(parser.value("export-checkpoint"), spec,
                                                                  parser.isSet("state-dict"));
        QString error;
        if (!dlion::files::writeAtomically(output, QByteArray(bytes.data(), qsizetype(bytes.size())), &error))
            return fail(error, 1);
    } catch (const std::exception &e) {
        return fail(QString::fromStdString(e.what()), 1);
    }
    return 0;
}

} // namespace

int main(int argc, char **argv)
{
    dlion::agent::setAllocatorThresholds();
    QCoreApplication app(argc, argv);
    QCoreApplication::setApplicationName(QStringLiteral("dlion-agent"));
    QCoreApplication::setApplicationVersion(QStringLiteral(DLION_VERSION_FULL));
    qRegisterMetaType<dlion::engine::WorkerResult>();

    const dlion::cmdline::Page page{
        QStringLiteral("dlion-agent"), QStringLiteral("DLion training agent, one per node"),
        QStringLiteral("dlion-agent [--listen HOST:PORT] [--secret-file FILE] [OPTIONS]"),
        QStringLiteral("Waits on HOST:PORT for a controller (dlion or dlion-studio) that proves it holds\n"
                       "the run secret, then trains the job it is sent and streams telemetry back. Prints\n"
                       "\"dlion-agent listening on HOST:PORT\" once it listens.\n\n"
                       "The secret is read from the environment variable DLION_SECRET, or from\n"
                       "--secret-file; it never appears on the command line. It must have at least 32\n"
                       "characters (make one with: openssl rand -hex 32 > secret). dlion and dlion-studio\n"
                       "start and stop agents themselves; run it by hand only on a node of your own."),
        {QStringLiteral("DLION_SECRET=$(cat secret) dlion-agent --listen 0.0.0.0:7070 --grace 60"),
         QStringLiteral("dlion-agent --listen 127.0.0.1:0 --secret-file ~/.dlion/secret --idle-exit 600")},
        QStringLiteral("0 after a requested shutdown, 1 it cannot listen or its parent is gone, 2 bad usage.")};
    QCommandLineParser parser;
    parser.addOption({"listen", "Address and port to listen on (port 0 picks a free one).", "HOST:PORT", "127.0.0.1:0"});
    parser.addOption({"secret-file", "Read the run secret from FILE instead of $DLION_SECRET.", "FILE"});
    parser.addOption({"grace", "Seconds a job keeps training after its controller detaches.", "SECONDS", "30"});
    parser.addOption({"exit-with-parent", "Exit when the process that started this agent exits."});
    parser.addOption({"idle-exit", "Exit after SECONDS with no job and no controller (0 = never).", "SECONDS", "0"});
    parser.addOption({"export-checkpoint", "Write checkpoint FILE's model for PyTorch to --output and exit.", "FILE"});
    parser.addOption({"dataset", "With --export-checkpoint: the dataset it was trained on.", "NAME", "fashion-mnist"});
    parser.addOption({"data-dir", "With --export-checkpoint: the dataset's folder.", "DIR"});
    parser.addOption({"output", "With --export-checkpoint: the file to write.", "FILE"});
    parser.addOption({"state-dict", "With --export-checkpoint: write a built-in model's state_dict, not TorchScript."});
    if (int code = 0; !dlion::cmdline::parse(page, parser, app.arguments(), &code))
        return code;
    if (parser.isSet("export-checkpoint"))
        return exportCheckpoint(parser);

    if (parser.isSet("exit-with-parent")) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() == 1)
            return fail(QStringLiteral("parent exited before the agent started"), 1);
    }

    dlion::agent::AgentServer::Options options;
    const QString listen = parser.value("listen");
    const int colon = listen.lastIndexOf(':');
    bool portOk = false;
    const uint port = colon > 0 ? listen.mid(colon + 1).toUInt(&portOk) : 0;
    QString host = colon > 0 ? listen.left(colon) : QString();
    if (host.startsWith('[') && host.endsWith(']'))
        host = host.mid(1, host.size() - 2);
    if (!portOk || port > 65535 || !options.address.setAddress(host))
        return fail(QStringLiteral("--listen \"%1\" is not HOST:PORT with a numeric address (e.g. 127.0.0.1:7070)").arg(listen));
    options.port = quint16(port);

    bool graceOk = false;
    options.graceS = parser.value("grace").toInt(&graceOk);
    if (!graceOk || options.graceS < 0)
        return fail(QStringLiteral("--grace must be a whole number of seconds"));
    bool idleOk = false;
    options.idleExitS = parser.value("idle-exit").toInt(&idleOk);
    if (!idleOk || options.idleExitS < 0)
        return fail(QStringLiteral("--idle-exit must be a whole number of seconds"));

    QString secretSource = QStringLiteral("DLION_SECRET");
    if (parser.isSet("secret-file")) {
        QFile f(parser.value("secret-file"));
        if (!f.open(QIODevice::ReadOnly))
            return fail(QStringLiteral("cannot read secret file %1: %2").arg(f.fileName(), f.errorString()));
        options.secret = f.readAll().trimmed();
        secretSource = QStringLiteral("secret file %1").arg(f.fileName());
    } else {
        options.secret = qgetenv("DLION_SECRET");
    }
    if (options.secret.isEmpty())
        return fail(QStringLiteral("no run secret: set DLION_SECRET or pass --secret-file"));
    // Anyone who guesses the secret can run code here: refuse a guessable one.
    if (options.secret.size() < dlion::protocol::handshake::kMinSecretSize)
        return fail(QStringLiteral("the run secret in %1 has %2 characters; it needs at least %3 (128 random bits as hex): "
                                   "make one with `openssl rand -hex 32`")
                        .arg(secretSource)
                        .arg(options.secret.size())
                        .arg(dlion::protocol::handshake::kMinSecretSize));

    dlion::agent::AgentServer server(options);
    QString error;
    if (!server.listen(&error))
        return fail(error, 1);
    // Everything is loaded: drop the library pages only the loader read
    // (about 100 of an idle agent's 160 MB resident; library_pages.h).
    const dlion::agent::ReleasedPages released = dlion::agent::releaseUnwrittenFilePages();
    qCInfo(lcAgent, "released %lld kB of unwritten file pages in %d mappings",
           static_cast<long long>(released.bytes / 1024), released.mappings);
    QObject::connect(&server, &dlion::agent::AgentServer::shutdownRequested, &app, &QCoreApplication::quit,
                     Qt::QueuedConnection);
    // The controller that started us reads this line to learn the port.
    std::printf("dlion-agent listening on %s:%u\n", qPrintable(options.address.toString()), unsigned(server.port()));
    std::fflush(stdout);
    return app.exec();
}
