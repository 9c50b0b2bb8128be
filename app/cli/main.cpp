// dlion: the headless face of DLion Studio, for scripts and servers.
#include "deploy_command.h"
#include "report_command.h"
#include "run_command.h"
#include "runs_command.h"

#include <QCoreApplication>
#include <QSocketNotifier>
#include <QTextStream>

#include <csignal>
#include <sys/socket.h>
#include <unistd.h>

namespace {

int g_signalPipe[2] = {-1, -1};

void onSignal(int)
{
    const char c = 1;
    [[maybe_unused]] auto n = ::write(g_signalPipe[1], &c, 1);
}

const char *kUsage =
    "Usage: dlion COMMAND [options]\n\n"
    "Commands:\n"
    "  run        Train a job on the embedded local cluster (or a cluster file).\n"
    "  deploy     Install, start and check agents on the hosts of a cluster file.\n"
    "  stop       Stop agents left on the hosts of a cluster file and remove their files.\n\n"
    "Experiment store:\n"
    "  runs       List, search and delete recorded runs.\n"
    "  report     Write a run's report (html, pdf, csv, json).\n"
    "  compare    Compare runs: time to accuracy, accuracy at budget, bytes, speedup.\n"
    "  tag, note  Tag a run, attach a note.\n\n"
    "Run 'dlion COMMAND --help' for the options of a command.\n"
    "Options: --help, --version\n";

} // namespace

int main(int argc, char **argv)
{
    // report and compare draw plots with QCustomPlot, which needs a QApplication.
    if (argc >= 2 && dlion::cli::isPlottingCommand(argv[1]))
        return dlion::cli::runPlottingCommand(argc, argv);
    QCoreApplication app(argc, argv);
    QCoreApplication::setApplicationName(QStringLiteral("dlion"));
    QCoreApplication::setApplicationVersion(QStringLiteral(DLION_VERSION));
    QStringList args = app.arguments();
    QTextStream out(stdout), err(stderr);
    if (args.size() < 2 || args[1] == QLatin1String("--help") || args[1] == QLatin1String("-h")) {
        (args.size() < 2 ? err : out) << kUsage;
        return args.size() < 2 ? 2 : 0;
    }
    if (args[1] == QLatin1String("--version")) {
        out << "dlion " << DLION_VERSION << "\n";
        return 0;
    }
    const QString command = args[1];
    args.removeAt(1);

    if (command == QLatin1String("run")) {
        dlion::cli::RunCommand run;
        // Signals arrive through a socket pair so they are handled on the event loop.
        if (::socketpair(AF_UNIX, SOCK_STREAM, 0, g_signalPipe) == 0) {
            auto *notifier = new QSocketNotifier(g_signalPipe[0], QSocketNotifier::Read, &app);
            QObject::connect(notifier, &QSocketNotifier::activated, &run, [&run] {
                char c;
                [[maybe_unused]] auto n = ::read(g_signalPipe[0], &c, 1);
                run.interrupt();
            });
            std::signal(SIGINT, onSignal);
            std::signal(SIGTERM, onSignal);
        }
        return run.exec(args);
    }
    if (command == QLatin1String("deploy") || command == QLatin1String("stop"))
        return dlion::cli::DeployCommand(command == QLatin1String("deploy") ? dlion::cli::DeployCommand::Mode::Deploy
                                                                             : dlion::cli::DeployCommand::Mode::Stop)
            .exec(args);
    if (command == QLatin1String("runs"))
        return dlion::cli::runsCommand(args);
    if (command == QLatin1String("tag"))
        return dlion::cli::tagCommand(args);
    if (command == QLatin1String("note"))
        return dlion::cli::noteCommand(args);
    err << "dlion: unknown command \"" << command << "\"\n\n" << kUsage;
    return 2;
}
