// dlion: the headless face of DLion Studio, for scripts and servers.
#include "deploy_command.h"
#include "export_command.h"
#ifdef DLION_HAVE_REPORTS
#include "report_command.h"
#endif
#include "run_command.h"
#include "runs_command.h"

#include <command_line.h>
#include <dlion_version.h>
#include <strategy_knobs.h>

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

const char *kCommands =
    "Commands:\n"
    "  run        Train a job on the embedded local cluster (or a cluster file).\n"
    "  attach     Take over a local run (started with --grace) whose dlion run went away.\n"
    "  deploy     Install, start and check agents on the hosts of a cluster file.\n"
    "  stop       Stop agents left on the hosts of a cluster file and remove their files.\n"
    "  knobs      List every strategy's knobs (--option KNOB=VALUE): type, range, default.\n\n"
    "Experiment store:\n"
    "  runs       List, search and delete recorded runs.\n"
#ifdef DLION_HAVE_REPORTS
    "  report     Write a run's report (html, pdf, csv, json).\n"
    "  compare    Compare runs: time to accuracy, accuracy at budget, bytes, speedup.\n"
#endif
    "  export     Write a run's trained model for Python (TorchScript or state_dict).\n"
    "  tag, note  Tag a run, attach a note.\n\n"
    "Run 'dlion COMMAND --help' for the options of a command.";

// Prints the knob schema, the one every part of DLion Studio checks knobs against.
int knobsCommand(const QStringList &args)
{
    const dlion::cmdline::Page page{
        QStringLiteral("dlion knobs"), QStringLiteral("list every strategy's knobs"), QStringLiteral("dlion knobs"),
        QStringLiteral("Each strategy's knobs, as a job's strategy_options or 'dlion run --option KNOB=VALUE' take them:\n"
                       "type and range, default, and what the knob does. A job with an unknown knob or a value out of\n"
                       "range is refused with a message naming the knob."),
        {QStringLiteral("dlion knobs"), QStringLiteral("dlion run --strategy hop --option staleness=2 --option topology=all")},
        QStringLiteral("0 success, 2 bad usage.")};
    QCommandLineParser parser;
    if (int code = 0; !dlion::cmdline::parse(page, parser, args, &code))
        return code;
    QTextStream(stdout) << dlion::protocol::knobsHelp();
    return 0;
}

} // namespace

int main(int argc, char **argv)
{
#ifdef DLION_HAVE_REPORTS
    // report and compare draw plots with QCustomPlot, which needs a QApplication.
    if (argc >= 2 && dlion::cli::isPlottingCommand(argv[1]))
        return dlion::cli::runPlottingCommand(argc, argv);
#endif
    QCoreApplication app(argc, argv);
    QCoreApplication::setApplicationName(QStringLiteral("dlion"));
    QCoreApplication::setApplicationVersion(QStringLiteral(DLION_VERSION_FULL));
    QStringList args = app.arguments();
    QTextStream err(stderr);
    const dlion::cmdline::Page page{
        QStringLiteral("dlion"), QStringLiteral("the headless face of DLion Studio, for scripts and servers"),
        QStringLiteral("dlion COMMAND [OPTIONS]\ndlion --help | --version"), QString::fromLatin1(kCommands),
        {QStringLiteral("dlion run --workers 4 --strategy dlion --seconds 90"), QStringLiteral("dlion export last -o model.pt"),
         QStringLiteral("dlion run --help")},
        QStringLiteral("0 success, 1 the command failed, 2 bad usage (each command's --help has the details).")};
    if (args.size() < 2 || args[1].startsWith(QLatin1Char('-'))) {
        QCommandLineParser parser;
        int code = 2;
        // Only --help and --version come before a command.
        if (dlion::cmdline::parse(page, parser, args.mid(0, 2), &code))
            err << "dlion: give a command\n\n" << dlion::cmdline::manText(page, parser);
        return code;
    }
    const QString command = args[1];
    args.removeAt(1);

    if (command == QLatin1String("run") || command == QLatin1String("attach")) {
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
        return command == QLatin1String("run") ? run.exec(args) : run.attach(args);
    }
    if (command == QLatin1String("deploy") || command == QLatin1String("stop"))
        return dlion::cli::DeployCommand(command == QLatin1String("deploy") ? dlion::cli::DeployCommand::Mode::Deploy
                                                                             : dlion::cli::DeployCommand::Mode::Stop)
            .exec(args);
    if (command == QLatin1String("knobs"))
        return knobsCommand(args);
    if (command == QLatin1String("runs"))
        return dlion::cli::runsCommand(args);
    if (command == QLatin1String("export"))
        return dlion::cli::exportCommand(args);
    if (command == QLatin1String("tag"))
        return dlion::cli::tagCommand(args);
    if (command == QLatin1String("note"))
        return dlion::cli::noteCommand(args);
#ifndef DLION_HAVE_REPORTS
    if (command == QLatin1String("report") || command == QLatin1String("compare")) {
        err << "dlion: \"" << command << "\" is not in this build: it was built with DLION_BUILD_GUI=OFF, and reports "
               "draw their plots with Qt Widgets; use a dlion built with the GUI on the same run store\n";
        return 2;
    }
#endif
    err << "dlion: unknown command \"" << command << "\"\n\n" << kCommands << "\n";
    return 2;
}
