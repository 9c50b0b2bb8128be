#include "run_command.h"

#include "store_access.h"

#include <command_line.h>
#include <link_presets.h>
#include <local_cluster.h>
#include <safe_file.h>

#include <QCoreApplication>
#include <QJsonArray>
#include <QTextStream>

#include <unistd.h>

namespace dlion::cli {

namespace {

QTextStream &out() { return stdOut(); }
QTextStream &err() { return stdErr(); }

// Command-line flags and the job-file keys they override.
struct FlagSpec {
    const char *flag;
    const char *key;
    const char *value;
    const char *help;
    bool numeric;
};

const FlagSpec kFlags[] = {
    {"workers", "workers", "N", "Number of local workers (default 4).", true},
    {"strategy", "strategy", "NAME", "dlion, allreduce, gaia, ako or hop.", false},
    {"model", "model", "NAME", "lenet5, mlp, cnn, or a TorchScript file PATH.pt.", false},
    {"dataset", "dataset", "NAME", "fashion-mnist, mnist, cifar10, synthetic, shapes, imagefolder, csv or npy.", false},
    {"data-dir", "data_dir", "DIR", "Dataset folder (default: the Debian package path).", false},
    {"test-set", "test_set", "local|shared", "With --data-dirs: score each worker on its own folder's test split\n"
                                             "(local, the default) or on --dataset/--data-dir's (shared).", false},
    {"partition", "partition", "P", "iid or dirichlet:ALPHA.", false},
    {"batch-size", "batch_size", "N", "Samples per worker per round.", true},
    {"lr", "lr", "X", "Learning rate.", true},
    {"lr-schedule", "lr_schedule", "S", "constant (default), warmup:ROUNDS (linear warm-up), step:ROUNDS:GAMMA\n"
                                        "(lr x GAMMA every ROUNDS), or warmup:ROUNDS+step:ROUNDS:GAMMA.", false},
    {"seconds", "budget.seconds", "T", "Training time budget in seconds.", true},
    {"epochs", "budget.epochs", "E", "Epochs over the whole training set.", true},
    {"target-accuracy", "budget.target_accuracy", "A", "Stop once test accuracy reaches A (0-1).", true},
    {"max-rounds", "budget.max_rounds", "N", "Stop after N rounds.", true},
    {"eval-interval", "eval_interval_s", "S", "Seconds between evaluations.", true},
    {"eval-samples", "eval_samples", "N", "Test samples every replica is scored on at each evaluation.", true},
    {"seed", "seed", "S", "Random seed.", true},
    {"threads", "threads", "N", "Intra-op threads per worker.", true},
    {"device", "device", "D", "cpu or cuda.", false},
    {"checkpoint-dir", "checkpoint.dir", "DIR", "Write periodic checkpoints of every worker here (on its host).", false},
    {"checkpoint-interval", "checkpoint.interval_s", "S", "Seconds between checkpoints (default 60).", true},
    {"checkpoint-keep", "checkpoint.keep", "N", "Newest checkpoints kept per worker (default 3).", true},
    {"resume-from", "resume_from", "DIR", "Start from the newest checkpoints in DIR: rounds, time and budget go on.", false},
};

// --links: a preset name, or a file holding an N x N matrix of Mbit/s.
bool parseLinks(const QString &value, QJsonObject *emulation)
{
    const QStringList &presets = protocol::linkPresetNames();
    if (presets.contains(value)) {
        emulation->insert("links", value);
        return true;
    }
    constexpr qint64 kMaxMatrixBytes = 1 << 20;  // a line of numbers per worker
    QString error;
    const std::optional<QByteArray> matrix = files::readRegular(value, kMaxMatrixBytes, &error);
    if (!matrix) {
        err() << "dlion run: --links \"" << value << "\" is neither a preset (" << presets.join(", ")
              << ") nor a readable matrix file (" << error << ")\n";
        return false;
    }
    QJsonArray rows;
    for (const QByteArray &line : matrix->split('\n')) {
        QJsonArray row;
        for (const QByteArray &cell : line.simplified().split(' ')) {
            bool ok = false;
            if (!cell.isEmpty())
                row.append(cell.toDouble(&ok));
            if (!cell.isEmpty() && !ok) {
                err() << "dlion run: " << value << ": \"" << cell << "\" is not a number of Mbit/s\n";
                return false;
            }
        }
        if (!row.isEmpty())
            rows.append(row);
    }
    emulation->insert("links", rows);
    return true;
}


const cmdline::Page &runPage()
{
    static const cmdline::Page page{
        QStringLiteral("dlion run"), QStringLiteral("train one model on a micro-cloud of workers"),
        QStringLiteral("dlion run [--config JOB.json|yaml] [--cluster CLUSTER.json|yaml] [OPTIONS]"),
        QStringLiteral("Without --cluster, starts the embedded local cluster: N dlion-agent processes on\n"
                       "this machine (the dlion-agent next to dlion, or $DLION_AGENT). Flags override the\n"
                       "job file. Writes DIR/summary.json and records the run in the run store.\n"
                       "Ctrl-C stops the workers cleanly; a second Ctrl-C exits at once."),
        {QStringLiteral("dlion run --workers 4 --strategy dlion --slowdown 1,1,2,4 --links wan-hetero --seconds 90"),
         QStringLiteral("dlion run --config job.yaml --out runs/first"),
         QStringLiteral("dlion run --cluster lab.yaml --seconds 300")},
        QStringLiteral("0 success, 1 the run failed, 2 bad usage or configuration (the message names the field).")};
    return page;
}

void addRunOptions(QCommandLineParser &parser)
{
    parser.addOption({"config", "Job file (JSON or YAML).", "FILE"});
    parser.addOption({"slowdown", "Per-worker compute slowdown factors, e.g. 1,1,2,4.", "LIST"});
    parser.addOption({"data-dirs", "One data folder per local worker, e.g. /data/a,/data/b: each worker trains\n"
                                   "on its own folder's data (in --dataset's format), no global partition.", "LIST"});
    parser.addOption({"links", "Emulated links: lan, lan-hetero, wan, wan-hetero, none, or a file with an\n"
                               "N x N matrix of Mbit/s (one row per line).", "PRESET|FILE"});
    parser.addOption({"latency-ms", "Emulated latency of every link.", "MS"});
    parser.addOption({"option", "Strategy knob, e.g. --option dkt=false --option dkt_period=25 (repeatable).", "KEY=VALUE"});
    parser.addOption({"out", "Run directory (default: a new folder under the data directory).", "DIR"});
    parser.addOption({"quiet", "Print only the summary."});
    parser.addOption({"cluster", "Deploy agents to the hosts of this cluster file over SSH instead of local workers.", "FILE"});
    parser.addOption({"accept-new-host-keys", "With --cluster: trust and record host keys not yet known."});
    parser.addOption({"restart-lost", "Restart a lost local worker's agent S seconds after the loss and let it\n"
                                      "rejoin the group (at most 3 times per worker).", "S"});
    parser.addOption({"grace", "Local agents keep training S seconds after this command dies, for\n"
                               "'dlion attach RUN_DIR' to take over (default 0: they end with it).", "S"});
    parser.addOption({"store", "Run store to record the run in (default: $DLION_STORE or the user's data directory).", "PATH"});
    for (const FlagSpec &f : kFlags)
        parser.addOption({QString::fromLatin1(f.flag), QString::fromLatin1(f.help), QString::fromLatin1(f.value)});
}

// The kFlags, --data-dirs and --slowdown, as job-file keys.
bool readFlags(const QCommandLineParser &parser, QJsonObject &overrides)
{
    if (parser.isSet("data-dirs")) {
        // Each worker trains on all of its own folder: no global partition.
        QJsonArray dirs;
        for (const QString &dir : parser.value("data-dirs").split(','))
            dirs.append(QJsonObject{{"data_dir", dir.trimmed()}});
        overrides.insert("worker_data", dirs);
    }
    for (const FlagSpec &f : kFlags) {
        if (!parser.isSet(f.flag))
            continue;
        const QString v = parser.value(f.flag);
        bool ok = true;
        overrides.insert(f.key, f.numeric ? QJsonValue(v.toDouble(&ok)) : QJsonValue(v));
        if (!ok) {
            err() << "dlion run: --" << f.flag << " \"" << v << "\" is not a number\n";
            return false;
        }
    }
    if (!parser.isSet("slowdown"))
        return true;
    QJsonArray factors;
    for (const QString &part : parser.value("slowdown").split(',')) {
        bool ok = false;
        factors.append(part.trimmed().toDouble(&ok));
        if (!ok) {
            err() << "dlion run: --slowdown \"" << parser.value("slowdown") << "\" is not a comma-separated list of numbers\n";
            return false;
        }
    }
    overrides.insert("slowdown", factors);
    return true;
}

// --links, --latency-ms and --option, field by field, so a job file's other
// emulation settings and knobs stay.
bool readEmulationAndKnobs(const QCommandLineParser &parser, QJsonObject &overrides)
{
    QJsonObject emulation;
    if (parser.isSet("links") && !parseLinks(parser.value("links"), &emulation))
        return false;
    if (parser.isSet("latency-ms"))
        emulation.insert("latency_ms", parser.value("latency-ms").toDouble());
    for (auto it = emulation.begin(); it != emulation.end(); ++it)
        overrides.insert("emulation." + it.key(), it.value());
    for (const QString &kv : parser.values("option")) {
        const int eq = int(kv.indexOf('='));
        if (eq <= 0) {
            err() << "dlion run: --option \"" << kv << "\" is not KEY=VALUE\n";
            return false;
        }
        const QString value = kv.mid(eq + 1);
        bool isNumber = false;
        const double d = value.toDouble(&isNumber);
        overrides.insert("strategy_options." + kv.left(eq), value == "true" || value == "false" ? QJsonValue(value == "true")
                                                            : isNumber                         ? QJsonValue(d)
                                                                                               : QJsonValue(value));
    }
    return true;
}

// An option of 0 to `max` seconds that only the local cluster has; false,
// with a message, when the value or the cluster does not fit.
bool readLocalSeconds(const QCommandLineParser &parser, const char *flag, int max, bool whole, double *seconds)
{
    bool ok = false;
    const QString v = parser.value(flag);
    *seconds = whole ? v.toInt(&ok) : v.toDouble(&ok);
    if (ok && *seconds >= 0 && *seconds <= max && !parser.isSet("cluster"))
        return true;
    err() << "dlion run: --" << flag << " takes 0 to " << max << (whole ? " whole" : "")
          << " seconds and works on the local cluster only (not with --cluster)\n";
    return false;
}

} // namespace

int RunCommand::exec(const QStringList &args)
{
    QCommandLineParser parser;
    addRunOptions(parser);
    if (int code = 0; !cmdline::parse(runPage(), parser, args, &code))
        return code;
    if (!parser.positionalArguments().isEmpty()) {
        err() << "dlion run: unexpected argument \"" << parser.positionalArguments().first() << "\"\n";
        return 2;
    }
    QJsonObject overrides;
    core::RunLauncher::Options options;
    if (!readFlags(parser, overrides) || !readEmulationAndKnobs(parser, overrides) || !readAgentOptions(parser, &options)
        || !loadCluster(parser, overrides))
        return 2;
    QString error;
    const auto request = core::buildJob(parser.value("config"), overrides, &error);
    const auto runDir = request ? core::RunLauncher::createRunDir(parser.value("out"), request->spec.strategy, &error)
                                : std::nullopt;
    if (!runDir) {
        err() << "dlion run: " << error << "\n";
        return 2;
    }
    options.runDir = *runDir;
    options.storePath = parser.value("store");
    follow(parser.isSet("quiet"));
    start(*request, parser.value("cluster"), options);
    return runEventLoop();
}

bool RunCommand::readAgentOptions(const QCommandLineParser &parser, core::RunLauncher::Options *options)
{
    double seconds = 0;
    if (parser.isSet("restart-lost")) {
        if (!readLocalSeconds(parser, "restart-lost", 3600, false, &seconds))
            return false;
        options->restartLostMs = int(seconds * 1000);
    }
    if (parser.isSet("grace")) {
        if (!readLocalSeconds(parser, "grace", 86400, true, &seconds))
            return false;
        options->graceS = int(seconds);
    }
    return true;
}

bool RunCommand::loadCluster(const QCommandLineParser &parser, QJsonObject &overrides)
{
    if (!parser.isSet("cluster"))
        return true;
    m_remote = std::make_unique<ConsoleDeployer>();
    QString error;
    if (m_remote->load(parser.value("cluster"), parser.isSet("accept-new-host-keys"), parser.isSet("quiet"), &error)
        && m_remote->applyTo(overrides, &error))
        return true;
    err() << "dlion run: " << error << "\n";
    return false;
}

void RunCommand::start(const core::JobRequest &request, const QString &clusterFile, const core::RunLauncher::Options &options)
{
    out() << "starting " << request.workers << (m_remote ? " workers on the cluster's hosts (" : " local workers (")
          << request.spec.strategy << ", " << request.spec.model << " on " << request.spec.dataset << ")\n";
    out().flush();
    m_clock.start();
    if (m_remote)
        m_launcher.startRemote(request, m_remote->takeDeployer(), clusterFile, options);
    else
        m_launcher.startLocal(request, options);
}

int RunCommand::attach(const QStringList &args)
{
    m_name = QStringLiteral("dlion attach");
    const cmdline::Page page{
        QStringLiteral("dlion attach"), QStringLiteral("take over a run whose dlion run went away"),
        QStringLiteral("dlion attach RUN_DIR [--quiet]"),
        QStringLiteral("A local run started with 'dlion run --grace S' keeps training S seconds after its\n"
                       "dlion run (or DLion Studio) is closed or killed; the agents of a --cluster run keep\n"
                       "training 30 s. 'dlion attach' connects to its agents again,\n"
                       "records what they buffered meanwhile into the same stored run, shows progress\n"
                       "and, like dlion run, writes RUN_DIR/summary.json at the end."),
        {QStringLiteral("dlion run --grace 120 --seconds 600 --out runs/long   # then the terminal closes"),
         QStringLiteral("dlion attach runs/long")},
        QStringLiteral("0 the run finished, 1 it failed or its agents are gone, 2 bad usage.")};
    QCommandLineParser parser;
    parser.addOption({"quiet", "Print only the summary."});
    parser.addPositionalArgument(QStringLiteral("RUN_DIR"), QStringLiteral("The --out folder of the run."));
    if (int code = 0; !cmdline::parse(page, parser, args, &code))
        return code;
    if (parser.positionalArguments().size() != 1) {
        err() << "dlion attach: give the run's folder (its --out)\n";
        return 2;
    }
    follow(parser.isSet("quiet"));
    m_clock.start();
    m_launcher.attach(parser.positionalArguments().first());
    if (m_launcher.isActive()) {
        out() << "attaching to run " << m_launcher.recordedRunId() << " (" << m_launcher.request().workers << " workers)\n";
        out().flush();
    }
    return runEventLoop();
}

void RunCommand::follow(bool quiet)
{
    using core::RunLauncher;
    m_tty = isatty(STDOUT_FILENO) && !quiet;
    connect(&m_launcher, &RunLauncher::message, this, [](const QString &m) { err() << m << "\n"; err().flush(); });
    connect(&m_launcher, &RunLauncher::failed, this, [this](const QString &reason) {
        err() << m_name << ": " << reason << "\n";
        m_exitCode = 1;
    });
    connect(&m_launcher, &RunLauncher::finished, this, &RunCommand::printSummary);
    connect(&m_launcher, &RunLauncher::released, this, [this](bool ok) {
        if (!ok)
            m_exitCode = 1;
        QCoreApplication::exit(0);
    });
    if (!quiet) {
        connect(&m_progressTimer, &QTimer::timeout, this, &RunCommand::printProgress);
        m_progressTimer.start(m_tty ? 1000 : 5000);
    }
}

int RunCommand::runEventLoop()
{
    if (m_launcher.phase() == core::RunLauncher::Phase::Failed)
        return m_exitCode;  // failed at once: released before any event loop could end
    return QCoreApplication::exec() == 0 ? m_exitCode : 1;
}

void RunCommand::printProgress()
{
    core::RunSession &session = m_launcher.session();
    const core::RunData &d = session.data();
    if (d.workers() == 0)
        return;
    QString line = QStringLiteral("[%1 s]").arg(m_clock.elapsed() / 1000.0, 6, 'f', 1);
    if (const auto e = d.lastGlobalEval())
        line += QStringLiteral(" accuracy %1%").arg(100 * e->globalAccuracy, 5, 'f', 1);
    double rate = 0;
    QStringList perWorker;
    for (int w = 0; w < d.workers(); ++w) {
        const auto *r = d.lastRound(w);
        if (!r || !d.lostReason(w).isEmpty()) {
            perWorker << QStringLiteral("w%1 %2").arg(w).arg(protocol::workerStateName(session.workerState(w)));
            continue;
        }
        rate += r->rate;
        perWorker << QStringLiteral("w%1 %2/s b%3 loss %4").arg(w).arg(r->rate, 0, 'f', 0).arg(r->batch).arg(r->loss, 0, 'f', 3);
    }
    if (rate > 0)
        line += QStringLiteral(" | compute %1 samples/s").arg(rate, 0, 'f', 0);  // sum of compute-only rates
    out() << line << " | " << perWorker.join(" | ") << "\n";
    out().flush();
}

void RunCommand::printSummary(bool ok, const QString &message)
{
    m_progressTimer.stop();
    m_exitCode = 1;
    if (m_launcher.summaryPath().isEmpty())
        return;  // the launcher said why
    const QJsonObject &summary = m_launcher.summary();
    const QJsonObject tta = summary.value("time_to_accuracy").toObject();
    auto ttaText = [&](const char *key) {
        const QJsonValue v = tta.value(key);
        return v.isNull() ? QStringLiteral("not reached") : QStringLiteral("%1 s").arg(v.toDouble(), 0, 'f', 1);
    };
    out() << (ok ? "run finished" : "run FAILED") << ": final accuracy "
          << QString::number(100 * summary.value("final_accuracy").toDouble(), 'f', 2) << "%, "
          << QString::number(summary.value("samples_per_s").toDouble(), 'f', 0) << " samples/s, "
          << "80% after " << ttaText("0.80") << ", 85% after " << ttaText("0.85") << ", "
          << QString::number(summary.value("bytes_sent").toDouble() / 1e6, 'f', 1) << " MB sent\n";
    if (!ok)
        err() << m_name << ": " << message << "\n";
    out() << "summary: " << m_launcher.summaryPath() << "\n";
    if (const QString model = m_launcher.modelPath(); !model.isEmpty())
        out() << "model: " << model << " (dlion export)\n";
    if (const QString file = m_launcher.takenOverClusterFile(); !file.isEmpty())  // no deployer here to clean up
        out() << "the agents' folders stay on the hosts: remove them with dlion stop --cluster " << file << "\n";
    const core::RunRecorder &recorder = m_launcher.recorder();
    if (recorder.runId() > 0 && !recorder.isRecording())
        out() << "run id: " << recorder.runId() << " in " << m_launcher.storePath() << " (dlion report " << recorder.runId() << ")\n";
    out().flush();
    m_exitCode = ok ? 0 : 1;
}

void RunCommand::interrupt()
{
    if (++m_interrupts > 1) {
        err() << m_name << ": interrupted again, exiting now\n";
        if (core::LocalCluster *cluster = m_launcher.localCluster())
            cluster->shutdown(0);
        if (m_remote)
            err() << m_name << ": agents may still run on the cluster's hosts; remove them with: dlion stop --cluster FILE\n";
        ::_exit(130);
    }
    err() << m_name << ": stopping the workers (Ctrl-C again to exit at once)\n";
    err().flush();
    m_launcher.stop();
}

} // namespace dlion::cli
