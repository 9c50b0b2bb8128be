#include "run_command.h"

#include "store_access.h"

#include <command_line.h>
#include <handshake.h>
#include <link_presets.h>
#include <model_export.h>
#include <remote_agent.h>
#include <safe_file.h>

#include <QCommandLineParser>
#include <QCoreApplication>
#include <QDateTime>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
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
    {"model", "model", "NAME", "lenet5, mlp or cnn.", false},
    {"dataset", "dataset", "NAME", "fashion-mnist, mnist, cifar10, synthetic, shapes, imagefolder, csv or npy.", false},
    {"data-dir", "data_dir", "DIR", "Dataset folder (default: the Debian package path).", false},
    {"test-set", "test_set", "local|shared", "With --data-dirs: score each worker on its own folder's test split\n"
                                             "(local, the default) or on --dataset/--data-dir's (shared).", false},
    {"partition", "partition", "P", "iid or dirichlet:ALPHA.", false},
    {"batch-size", "batch_size", "N", "Samples per worker per round.", true},
    {"lr", "lr", "X", "Learning rate.", true},
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

} // namespace

int RunCommand::exec(const QStringList &args)
{
    const cmdline::Page page{
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
    QCommandLineParser parser;
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
    if (int code = 0; !cmdline::parse(page, parser, args, &code))
        return code;
    if (!parser.positionalArguments().isEmpty()) {
        err() << "dlion run: unexpected argument \"" << parser.positionalArguments().first() << "\"\n";
        return 2;
    }

    QJsonObject overrides;
    for (const FlagSpec &f : kFlags) {
        if (!parser.isSet(f.flag))
            continue;
        const QString v = parser.value(f.flag);
        if (f.numeric) {
            bool ok = false;
            const double d = v.toDouble(&ok);
            if (!ok) {
                err() << "dlion run: --" << f.flag << " \"" << v << "\" is not a number\n";
                return 2;
            }
            overrides.insert(f.key, d);
        } else {
            overrides.insert(f.key, v);
        }
    }
    if (parser.isSet("data-dirs")) {
        // Each worker trains on all of its own folder: no global partition.
        QJsonArray dirs;
        for (const QString &dir : parser.value("data-dirs").split(','))
            dirs.append(QJsonObject{{"data_dir", dir.trimmed()}});
        overrides.insert("worker_data", dirs);
    }
    if (parser.isSet("slowdown")) {
        QJsonArray factors;
        for (const QString &part : parser.value("slowdown").split(',')) {
            bool ok = false;
            factors.append(part.trimmed().toDouble(&ok));
            if (!ok) {
                err() << "dlion run: --slowdown \"" << parser.value("slowdown") << "\" is not a comma-separated list of numbers\n";
                return 2;
            }
        }
        overrides.insert("slowdown", factors);
    }
    QJsonObject emulation, options;
    if (parser.isSet("links") && !parseLinks(parser.value("links"), &emulation))
        return 2;
    if (parser.isSet("latency-ms"))
        emulation.insert("latency_ms", parser.value("latency-ms").toDouble());
    for (const QString &kv : parser.values("option")) {
        const int eq = int(kv.indexOf('='));
        if (eq <= 0) {
            err() << "dlion run: --option \"" << kv << "\" is not KEY=VALUE\n";
            return 2;
        }
        const QString value = kv.mid(eq + 1);
        bool isNumber = false;
        const double d = value.toDouble(&isNumber);
        options.insert(kv.left(eq), value == "true" || value == "false" ? QJsonValue(value == "true")
                                    : isNumber                         ? QJsonValue(d)
                                                                       : QJsonValue(value));
    }
    // Field by field, so a job file's other emulation settings and knobs stay.
    for (auto it = emulation.begin(); it != emulation.end(); ++it)
        overrides.insert("emulation." + it.key(), it.value());
    for (auto it = options.begin(); it != options.end(); ++it)
        overrides.insert("strategy_options." + it.key(), it.value());
    if (parser.isSet("restart-lost")) {
        bool ok = false;
        const double s = parser.value("restart-lost").toDouble(&ok);
        if (!ok || s < 0 || s > 3600 || parser.isSet("cluster")) {
            err() << "dlion run: --restart-lost takes 0 to 3600 seconds and works on the local cluster only (not with --cluster)\n";
            return 2;
        }
        m_restartLostMs = int(s * 1000);
    }
    if (parser.isSet("grace")) {
        bool ok = false;
        const int s = parser.value("grace").toInt(&ok);
        if (!ok || s < 0 || s > 86400 || parser.isSet("cluster")) {
            err() << "dlion run: --grace takes 0 to 86400 whole seconds and works on the local cluster only (not with --cluster)\n";
            return 2;
        }
        m_cluster.setGrace(s);
        m_graceS = s;
    }
    if (parser.isSet("cluster")) {
        m_remote = std::make_unique<ConsoleDeployer>();
        QString clusterError;
        if (!m_remote->load(parser.value("cluster"), parser.isSet("accept-new-host-keys"), parser.isSet("quiet"), &clusterError)
            || !m_remote->applyTo(overrides, &clusterError)) {
            err() << "dlion run: " << clusterError << "\n";
            return 2;
        }
    }
    QString error;
    auto request = core::buildJob(parser.value("config"), overrides, &error);
    if (!request) {
        err() << "dlion run: " << error << "\n";
        return 2;
    }
    m_request = *request;

    QString outDir = parser.value("out");
    if (outDir.isEmpty()) {
        outDir = core::RunStore::defaultRunsDir() + "/" + QDateTime::currentDateTime().toString("yyyyMMdd-HHmmss") + "-" + m_request.spec.strategy;
    }
    m_outDir = QDir(outDir);
    if (!m_outDir.mkpath(".")) {
        err() << "dlion run: cannot create the run directory " << outDir << "\n";
        return 2;
    }

    m_tty = isatty(STDOUT_FILENO) && !parser.isSet("quiet");
    // Record the run in the experiment store; a store problem never stops training.
    const QString storePath = parser.isSet("store") ? parser.value("store") : core::RunStore::defaultPath();
    if (m_store.open(storePath, core::RunStore::Mode::ReadWrite)) {
        m_recorder.setOutDir(m_outDir.absolutePath());
        m_recorder.setCluster(m_remote ? core::sshClusterInfo(m_remote->cluster(), parser.value("cluster"))
                                       : core::localClusterInfo(m_request.workers));
        m_recorder.attach(&m_session);
        connect(&m_recorder, &core::RunRecorder::recordingFailed, this,
                [](const QString &why) { err() << "dlion run: cannot record the run: " << why << "\n"; });
    } else {
        err() << "dlion run: not recording this run: " << m_store.errorString() << "\n";
    }
    m_secret = protocol::handshake::makeSecret();
    connect(&m_cluster, &core::LocalCluster::ready, this, &RunCommand::onClusterReady);
    connect(&m_cluster, &core::LocalCluster::failed, this, [this](const QString &reason) {
        err() << "dlion run: " << reason << "\n";
        m_exitCode = 1;
        QCoreApplication::exit(1);
    });
    followSession(parser.isSet("quiet"));
    out() << "starting " << m_request.workers << (m_remote ? " workers on the cluster's hosts (" : " local workers (")
          << m_request.spec.strategy << ", " << m_request.spec.model << " on " << m_request.spec.dataset << ")\n";
    out().flush();
    m_clock.start();
    if (m_remote)
        deployRemote();
    else
        m_cluster.start(m_request.workers, m_secret);
    return QCoreApplication::exec() == 0 ? m_exitCode : 1;
}

void RunCommand::followSession(bool quiet)
{
    connect(&m_session, &core::RunSession::logMessage, this, [](const QString &m) { err() << m << "\n"; err().flush(); });
    connect(&m_session, &core::RunSession::finished, this, &RunCommand::onFinished);
    if (!quiet) {
        connect(&m_progressTimer, &QTimer::timeout, this, [this] { printProgress(); });
        m_progressTimer.start(m_tty ? 1000 : 5000);
    }
}

void RunCommand::keepAttachPoint(const QList<core::AgentEndpoint> &agents, const QString &rendezvousHost,
                                 quint16 rendezvousPort, int graceS)
{
    if (!m_store.isOpen())
        return;  // no stored run to go on recording into
    core::AttachFile file;
    file.store = m_store.path();
    file.agents = agents;
    file.secret = m_secret;
    file.rendezvousHost = rendezvousHost;
    file.rendezvousPort = rendezvousPort;
    file.graceS = graceS;
    m_attachPoint = std::make_unique<core::AttachPoint>(&m_session, &m_recorder, m_outDir.path(), file);
    connect(m_attachPoint.get(), &core::AttachPoint::writeFailed, this, [](const QString &m) { err() << "dlion run: " << m << "\n"; });
}

int RunCommand::attach(const QStringList &args)
{
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
    m_outDir = QDir(parser.positionalArguments().first());
    QString error;
    const auto file = core::AttachFile::read(m_outDir.path(), &error);
    if (!file) {
        err() << "dlion attach: " << error << "\n";
        return 1;
    }
    if (!m_store.open(file->store, core::RunStore::Mode::ReadWrite)) {
        err() << "dlion attach: " << m_store.errorString() << "\n";
        return 1;
    }
    const auto run = m_store.loadRun(file->runId);
    if (!run) {
        err() << "dlion attach: " << m_store.errorString() << "\n";
        return 1;
    }
    m_tty = isatty(STDOUT_FILENO) && !parser.isSet("quiet");
    m_request.workers = run->data.workers();
    m_request.spec = run->data.job();
    m_secret = file->secret;
    if (run->info.cluster.value("kind").toString() == QLatin1String("ssh"))
        m_takenOverCluster = run->info.cluster.value("file").toString();
    followSession(parser.isSet("quiet"));
    m_session.attach(run->data, file->agents, m_secret, file->rendezvousHost, file->rendezvousPort, file->members,
                     file->generation);
    m_recorder.resume(file->runId, &m_session.data());
    m_recorder.attach(&m_session);
    keepAttachPoint(file->agents, file->rendezvousHost, file->rendezvousPort, file->graceS);
    out() << "attaching to run " << file->runId << " (" << file->agents.size() << " workers)\n";
    out().flush();
    m_clock.start();
    return QCoreApplication::exec() == 0 ? m_exitCode : 1;
}

void RunCommand::onClusterReady()
{
    m_rejoin = std::make_unique<core::LocalRejoin>(&m_cluster, &m_session);
    m_rejoin->setAutomatic(m_restartLostMs);
    connect(m_rejoin.get(), &core::LocalRejoin::message, this, [](const QString &m) { err() << m << "\n"; err().flush(); });
    const quint16 port = core::pickFreePort();
    if (m_graceS > 0)
        keepAttachPoint(m_cluster.endpoints(), core::LocalCluster::kHost, port, m_graceS);
    m_session.start(m_request.spec, m_cluster.endpoints(), m_secret, core::LocalCluster::kHost, port);
}

void RunCommand::printProgress(bool force)
{
    const core::RunData &d = m_session.data();
    if (d.workers() == 0 && !force)
        return;
    QString line = QStringLiteral("[%1 s]").arg(m_clock.elapsed() / 1000.0, 6, 'f', 1);
    if (const auto e = d.lastGlobalEval())
        line += QStringLiteral(" accuracy %1%").arg(100 * e->globalAccuracy, 5, 'f', 1);
    double rate = 0;
    QStringList perWorker;
    for (int w = 0; w < d.workers(); ++w) {
        const auto *r = d.lastRound(w);
        if (!r || !d.lostReason(w).isEmpty()) {
            perWorker << QStringLiteral("w%1 %2").arg(w).arg(protocol::workerStateName(m_session.workerState(w)));
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

void RunCommand::onFinished(bool ok, const QString &message)
{
    m_progressTimer.stop();
    m_session.shutdownAgents();
    const QJsonObject summary = m_session.data().summary();
    const QString path = m_outDir.filePath("summary.json");
    if (QString error; !files::writeAtomically(path, QJsonDocument(summary).toJson(), &error)) {
        err() << "dlion run: " << error << "\n";
        QCoreApplication::exit(1);
        return;
    }
    QString modelError;
    const QString model = core::keepFinalModel(m_session.data(), m_outDir.path(), &modelError);
    if (!modelError.isEmpty())
        err() << "dlion run: the final model was not kept: " << modelError << "\n";
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
        err() << "dlion run: " << message << "\n";
    out() << "summary: " << QFileInfo(path).absoluteFilePath() << "\n";
    if (!model.isEmpty())
        out() << "model: " << model << " (dlion export)\n";
    if (!m_takenOverCluster.isEmpty())  // no deployer here to clean up after the agents
        out() << "the agents' folders stay on the hosts: remove them with dlion stop --cluster " << m_takenOverCluster << "\n";
    if (m_recorder.runId() > 0 && m_recorder.finish(ok, message))
        out() << "run id: " << m_recorder.runId() << " in " << m_store.path() << " (dlion report " << m_recorder.runId() << ")\n";
    out().flush();
    m_exitCode = ok ? 0 : 1;
    exitAfterCleanup(0);
}

void RunCommand::deployRemote()
{
    core::Deployer &deployer = m_remote->deployer();
    connect(&deployer, &core::Deployer::deployed, this, [this](const QList<core::AgentEndpoint> &agents) {
        if (m_interrupts > 0)
            return exitAfterCleanup(1);
        const quint16 port = m_remote->rendezvousPort(agents[0].host);
        keepAttachPoint(agents, agents[0].host, port, core::RemoteAgent::kGraceS);
        m_session.start(m_request.spec, agents, m_secret, agents[0].host, port);
    });
    connect(&deployer, &core::Deployer::failed, this, [] {
        err() << "dlion run: the deployment failed\n";  // each host's reason is printed as it happens
        QCoreApplication::exit(1);
    });
    deployer.deploy(m_secret);
}

void RunCommand::exitAfterCleanup(int code)
{
    if (!m_remote)
        return QCoreApplication::exit(code);
    connect(&m_remote->deployer(), &core::Deployer::stopped, this, [this, code](bool ok) {
        if (!ok)
            m_exitCode = 1;
        QCoreApplication::exit(code);
    });
    m_remote->deployer().stop();
}

void RunCommand::interrupt()
{
    if (++m_interrupts > 1) {
        err() << "dlion run: interrupted again, exiting now\n";
        m_cluster.shutdown(0);
        if (m_remote)
            err() << "dlion run: agents may still run on the cluster's hosts; remove them with: dlion stop --cluster FILE\n";
        ::_exit(130);
    }
    err() << "dlion run: stopping the workers (Ctrl-C again to exit at once)\n";
    if (m_session.state() == core::RunSession::State::Running)
        m_session.stop();
    else if (!m_remote)
        QCoreApplication::exit(1);
    else if (!m_remote->deployer().isBusy())
        exitAfterCleanup(1);  // else the deployment's end sees the interrupt
}

} // namespace dlion::cli
