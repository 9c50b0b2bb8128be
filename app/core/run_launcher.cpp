#include "run_launcher.h"

#include "attach_point.h"
#include "deployer.h"
#include "local_cluster.h"
#include "local_rejoin.h"
#include "model_export.h"
#include "remote_agent.h"

#include <handshake.h>
#include <safe_file.h>

#include <QDateTime>
#include <QDir>
#include <QFileInfo>
#include <QHostAddress>
#include <QJsonDocument>
#include <QTimer>

namespace dlion::core {

namespace {
constexpr int kAgentGraceMs = 3000;  // how long released local agents get to exit before they are killed
constexpr quint16 kDefaultRendezvousPort = 29500;  // c10d's customary port
} // namespace

RunLauncher::RunLauncher(QObject *parent) : QObject(parent)
{
    connect(&m_session, &RunSession::logMessage, this, &RunLauncher::message);
    connect(&m_session, &RunSession::finished, this, &RunLauncher::onSessionFinished);
    connect(&m_recorder, &RunRecorder::recordingFailed, this,
            [this](const QString &why) { Q_EMIT message(tr("Recording this run failed: %1").arg(why)); });
}

RunLauncher::~RunLauncher()
{
    blockSignals(true);  // the faces listening may be half destroyed
    releaseAgents();
}

std::optional<QString> RunLauncher::createRunDir(const QString &requested, const QString &strategy, QString *error)
{
    const QString dir = !requested.isEmpty() ? requested
        : RunStore::defaultRunsDir() + QStringLiteral("/")
            + QDateTime::currentDateTime().toString(QStringLiteral("yyyyMMdd-HHmmss-")) + strategy;
    if (!QDir().mkpath(dir)) {
        *error = tr("cannot create the run folder %1; choose a writable one").arg(dir);
        return std::nullopt;
    }
    return dir;
}

quint16 RunLauncher::rendezvousPort(int configured, const QString &rank0Host)
{
    if (configured > 0)
        return quint16(configured);
    return QHostAddress(rank0Host).isLoopback() ? pickFreePort(rank0Host) : kDefaultRendezvousPort;
}

void RunLauncher::startLocal(const JobRequest &request, const Options &options)
{
    if (isActive())
        return;
    if (LocalCluster::agentProgram().isEmpty())
        return fail(tr("dlion-agent was not found next to this program or on PATH; build it or set DLION_AGENT."));
    if (!prepare(request, options, protocol::handshake::makeSecret()))
        return;
    recordAs(localClusterInfo(request.workers));
    m_cluster = std::make_unique<LocalCluster>();
    m_cluster->setGrace(options.graceS);
    connect(m_cluster.get(), &LocalCluster::failed, this,
            [this](const QString &reason) { fail(tr("The local agents could not start: %1").arg(reason)); });
    connect(m_cluster.get(), &LocalCluster::agentExited, this, [this](int worker, int code) {
        if (isActive())
            Q_EMIT message(tr("worker %1's agent exited (code %2)").arg(worker).arg(code));
    });
    connect(m_cluster.get(), &LocalCluster::ready, this, &RunLauncher::onLocalReady);
    setPhase(Phase::StartingAgents);
    m_cluster->start(request.workers, m_secret);
}

void RunLauncher::startRemote(const JobRequest &request, std::unique_ptr<Deployer> deployer, const QString &clusterFile,
                              const Options &options)
{
    if (isActive() || !prepare(request, options, protocol::handshake::makeSecret()))
        return;
    m_deployer = std::move(deployer);
    if (!request.spec.modelSha256.isEmpty())
        m_deployer->setModel(request.spec.model, request.spec.modelSha256);
    recordAs(sshClusterInfo(m_deployer->cluster(), clusterFile));
    connect(m_deployer.get(), &Deployer::failed, this, [this](const QString &reason) {
        // The deployer has removed what it started: nothing left to stop.
        m_deployer.release()->deleteLater();
        fail(tr("Deployment failed: %1").arg(reason));
    });
    connect(m_deployer.get(), &Deployer::deployed, this, &RunLauncher::onDeployed);
    setPhase(Phase::StartingAgents);
    m_deployer->deploy(m_secret);
}

void RunLauncher::startOnAgents(const JobRequest &request, const QList<AgentEndpoint> &agents, const QByteArray &secret,
                                const Options &options)
{
    if (isActive())
        return;
    if (agents.size() != request.workers)
        return fail(tr("The job is for %1 workers but %2 agents were given; give one agent per worker.")
                        .arg(request.workers).arg(agents.size()));
    if (secret.size() < protocol::handshake::kMinSecretSize)
        return fail(tr("The run secret has %1 characters; agents require at least %2 (make one with: openssl rand -hex 32).")
                        .arg(secret.size()).arg(protocol::handshake::kMinSecretSize));
    if (!prepare(request, options, secret))
        return;
    m_handStarted = true;
    recordAs(agentsClusterInfo(agents));
    const QString rank0 = agents.value(0).host;
    startSession(agents, rank0, rendezvousPort(0, rank0), 0);
}

void RunLauncher::resetFor(const JobRequest &request, const QByteArray &secret, const Options &options)
{
    m_request = request;
    m_secret = secret;
    m_options = options;
    m_released = false;
    m_handStarted = false;
    m_cancelled = false;
    m_attachPoint.reset();
    m_takenOverCluster.clear();
    m_summary = {};
    m_summaryPath.clear();
    m_modelPath.clear();
}

bool RunLauncher::prepare(const JobRequest &request, const Options &options, const QByteArray &secret)
{
    resetFor(request, secret, options);
    QString error;
    const auto dir = createRunDir(options.runDir, request.spec.strategy, &error);
    if (!dir) {
        fail(error);
        return false;
    }
    m_runDir = *dir;
    // A store that cannot open only costs the recording, never the run.
    if (!openStore(options.storePath.isEmpty() ? RunStore::defaultPath() : options.storePath))
        Q_EMIT message(tr("Not recording this run: %1").arg(m_store.errorString()));
    return true;
}

bool RunLauncher::openStore(const QString &path)
{
    if (!m_store.isOpen() || m_store.path() != path) {
        m_store.close();
        if (!m_store.open(path, RunStore::Mode::ReadWrite))
            return false;
    }
    if (!m_recorderAttached) {
        m_recorder.attach(&m_session);
        m_recorderAttached = true;
    }
    return true;
}

void RunLauncher::recordAs(const QJsonObject &cluster)
{
    m_recorder.setCluster(cluster);
    m_recorder.setOutDir(QFileInfo(m_runDir).absoluteFilePath());
}

void RunLauncher::onLocalReady()
{
    m_rejoin = std::make_unique<LocalRejoin>(m_cluster.get(), &m_session);
    m_rejoin->setAutomatic(m_options.restartLostMs);
    connect(m_rejoin.get(), &LocalRejoin::message, this, &RunLauncher::message);
    startSession(m_cluster->endpoints(), LocalCluster::kHost, rendezvousPort(0, LocalCluster::kHost), m_cluster->grace());
}

void RunLauncher::onDeployed(const QList<AgentEndpoint> &agents)
{
    if (m_cancelled)
        return fail(tr("Stopped before the run started."));
    const QString rank0 = agents.value(0).host;
    startSession(agents, rank0, rendezvousPort(m_deployer->cluster().rendezvousPort, rank0), RemoteAgent::kGraceS);
}

void RunLauncher::startSession(const QList<AgentEndpoint> &agents, const QString &rendezvousHost, quint16 port, int graceS)
{
    if (graceS > 0) {
        AttachFile file;
        file.agents = agents;
        file.rendezvousHost = rendezvousHost;
        file.rendezvousPort = port;
        file.graceS = graceS;
        keepAttachPoint(file);
    }
    m_session.start(m_request.spec, agents, m_secret, rendezvousHost, port);
    setPhase(Phase::Running);
    Q_EMIT runStarted(int(agents.size()));
}

void RunLauncher::keepAttachPoint(AttachFile file)
{
    if (!m_store.isOpen())
        return;  // no stored run to go on recording into
    file.store = m_store.path();
    file.secret = m_secret;
    m_attachPoint = std::make_unique<AttachPoint>(&m_session, &m_recorder, m_runDir, file);
    connect(m_attachPoint.get(), &AttachPoint::writeFailed, this, &RunLauncher::message);
}

void RunLauncher::attach(const QString &runDir)
{
    if (isActive())
        return;
    QString error;
    const auto file = AttachFile::read(runDir, &error);
    if (!file)
        return fail(tr("Cannot take the run over: %1").arg(error));
    if (!openStore(file->store))
        return fail(tr("Cannot take the run over: %1").arg(m_store.errorString()));
    const auto run = m_store.loadRun(file->runId);
    if (!run)
        return fail(tr("Cannot take the run over: %1").arg(m_store.errorString()));
    resetFor(JobRequest{run->data.job(), run->data.workers()}, file->secret, {});
    m_runDir = runDir;
    const bool ssh = run->info.cluster.value("kind").toString() == QLatin1String("ssh");
    m_takenOverCluster = ssh ? run->info.cluster.value("file").toString() : QString();
    m_session.attach(run->data, file->agents, m_secret, file->rendezvousHost, file->rendezvousPort, file->members,
                     file->generation);
    m_recorder.resume(file->runId, &m_session.data());
    keepAttachPoint(*file);
    setPhase(Phase::Running);
    Q_EMIT runStarted(m_request.workers);
}

void RunLauncher::stop()
{
    if (m_phase == Phase::StartingAgents && m_deployer && m_deployer->isBusy()) {
        m_cancelled = true;  // the deployment's end sees it and removes the agents
        return setPhase(Phase::Stopping);
    }
    if (m_phase == Phase::StartingAgents || (m_phase == Phase::Running && m_session.state() != RunSession::State::Running))
        return fail(tr("Stopped before the run started."));
    if (m_phase != Phase::Running)
        return;
    setPhase(Phase::Stopping);
    m_session.stop();
}

bool RunLauncher::canLeaveRunning() const
{
    return m_attachPoint && m_phase == Phase::Running && !m_deployer;
}

void RunLauncher::leaveRunning()
{
    if (!canLeaveRunning())
        return;
    m_recorder.flush();
    m_attachPoint->leave();
    m_released = true;  // the agents are not ours to stop any more
    if (m_cluster)
        m_cluster->release();
    setPhase(Phase::Idle);
}

int RunLauncher::graceS() const
{
    return m_attachPoint ? m_attachPoint->graceS() : 0;
}

bool RunLauncher::canRestartWorker(int worker) const
{
    return m_rejoin && m_rejoin->canRestart(worker);
}

void RunLauncher::restartWorker(int worker)
{
    if (m_rejoin)
        m_rejoin->restart(worker);
    else
        Q_EMIT message(tr("Only workers of the embedded local cluster can be restarted from here; restart a remote worker's agent on its host."));
}

void RunLauncher::onSessionFinished(bool ok, const QString &message)
{
    if (m_phase != Phase::Running && m_phase != Phase::Stopping)
        return;  // given up before it ran
    m_recorder.finish(ok, message);
    writeSummary();
    keepFinalModel();
    setPhase(ok ? Phase::Finished : Phase::Failed);
    Q_EMIT finished(ok, message);
    releaseAgents();
}

void RunLauncher::writeSummary()
{
    m_summary = m_session.data().summary();
    const QString path = QFileInfo(QDir(m_runDir).filePath(QStringLiteral("summary.json"))).absoluteFilePath();
    QString error;
    m_summaryPath = files::writeAtomically(path, QJsonDocument(m_summary).toJson(), &error) ? path : QString();
    if (m_summaryPath.isEmpty())
        Q_EMIT message(error);
}

void RunLauncher::keepFinalModel()
{
    QString error;
    m_modelPath = core::keepFinalModel(m_session.data(), m_runDir, &error);
    if (!error.isEmpty())
        Q_EMIT message(tr("The final model was not kept: %1").arg(error));
}

void RunLauncher::setPhase(Phase p)
{
    if (m_phase == p)
        return;
    m_phase = p;
    Q_EMIT phaseChanged(p);
}

void RunLauncher::fail(const QString &reason)
{
    setPhase(Phase::Failed);
    Q_EMIT failed(reason);
    releaseAgents();
}

void RunLauncher::releaseAgents()
{
    if (m_released)
        return;
    m_released = true;
    // Agents told to shut down exit on their own (taken-over ones too);
    // hand-started ones wait for the next job.
    if (!m_handStarted)
        m_session.shutdownAgents();
    m_rejoin.reset();
    if (m_cluster) {
        // Whatever still runs after a grace period is killed when the
        // cluster is deleted; no blocking wait, whatever the agents do.
        LocalCluster *cluster = m_cluster.release();
        cluster->setParent(this);
        QTimer::singleShot(kAgentGraceMs, cluster, &QObject::deleteLater);
    }
    if (!m_deployer)
        return void(Q_EMIT released(true));
    // Also removes the remote agents' files; deleted once every host is done.
    Deployer *deployer = m_deployer.release();
    deployer->setParent(this);
    connect(deployer, &Deployer::stopped, this, [this](bool ok) { Q_EMIT released(ok); });
    connect(deployer, &Deployer::stopped, deployer, &QObject::deleteLater);
    deployer->stop();
}

} // namespace dlion::core
