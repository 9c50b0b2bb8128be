#include "run_controller.h"

#include "ui_log.h"

#include <attach_point.h>
#include <deployer.h>
#include <handshake.h>
#include <local_cluster.h>
#include <local_rejoin.h>
#include <model_export.h>
#include <remote_agent.h>

#include <QDateTime>
#include <QDir>
#include <QHostAddress>
#include <QJsonArray>

#include <QTimer>

namespace dlion::ui {

namespace {
constexpr int kAgentGraceMs = 3000;
constexpr quint16 kDefaultRendezvousPort = 29500;  // c10d's customary port
} // namespace

RunController::RunController(QObject *parent) : QObject(parent)
{
    connect(&m_session, &core::RunSession::logMessage, this, &RunController::message);
    connect(&m_recorder, &core::RunRecorder::recordingFailed, this,
            [this](const QString &why) { Q_EMIT message(tr("Recording this run failed: %1").arg(why)); });
    connect(&m_session, &core::RunSession::finished, this, [this](bool ok, const QString &text) {
        keepFinalModel();
        releaseAgents();
        setPhase(ok ? Phase::Finished : Phase::Failed);
        Q_EMIT message(ok ? tr("Run finished.") : tr("Run failed: %1").arg(text));
        Q_EMIT ended(ok, text);
    });
}

RunController::~RunController()
{
    releaseAgents();
}

void RunController::setPhase(Phase p)
{
    if (m_phase == p)
        return;
    m_phase = p;
    qCInfo(lcUi) << "run phase" << p;
    Q_EMIT phaseChanged(p);
}

void RunController::startLocal(const core::JobRequest &request, int graceS)
{
    if (isActive())
        return;
    if (core::LocalCluster::agentProgram().isEmpty())
        return fail(tr("dlion-agent was not found next to dlion-studio or on PATH; build it or set DLION_AGENT."));
    m_request = request;
    m_paused = false;
    m_secret = protocol::handshake::makeSecret();
    m_left = false;
    m_attachPoint.reset();
    m_cluster = std::make_unique<core::LocalCluster>();
    m_cluster->setGrace(graceS);
    connect(m_cluster.get(), &core::LocalCluster::failed, this, [this](const QString &reason) {
        fail(tr("The local agents could not start: %1").arg(reason));
    });
    connect(m_cluster.get(), &core::LocalCluster::agentExited, this, [this](int worker, int code) {
        if (isActive())
            Q_EMIT message(tr("worker %1's agent exited (code %2)").arg(worker).arg(code));
    });
    prepareRecording(QJsonObject{{"kind", "local"}, {"workers", request.workers}, {"emulation", request.spec.emulation}});
    connect(m_cluster.get(), &core::LocalCluster::ready, this, [this] {
        m_rejoin = std::make_unique<core::LocalRejoin>(m_cluster.get(), &m_session);
        connect(m_rejoin.get(), &core::LocalRejoin::message, this, &RunController::message);
        const quint16 port = core::pickFreePort();
        if (m_cluster->grace() > 0)
            keepAttachPoint({.agents = m_cluster->endpoints(), .rendezvousHost = core::LocalCluster::kHost,
                             .rendezvousPort = port, .graceS = m_cluster->grace()});
        m_session.start(m_request.spec, m_cluster->endpoints(), m_secret, core::LocalCluster::kHost, port);
        setPhase(Phase::Running);
        Q_EMIT runStarted(m_cluster->size());
    });
    setPhase(Phase::StartingAgents);
    Q_EMIT message(tr("Starting %1 local agents…").arg(request.workers));
    m_cluster->start(request.workers, m_secret);
}

core::Deployer *RunController::makeDeployer(const core::ClusterSpec &cluster)
{
    auto *d = new core::Deployer(cluster, this);
    d->setAgentProgram(core::LocalCluster::agentProgram());
    d->setHostKeyPolicy(core::Deployer::HostKeyPolicy::Ask);
    connect(d, &core::Deployer::hostProgress, this, &RunController::hostProgress);
    connect(d, &core::Deployer::hostFailed, this, &RunController::hostFailed);
    connect(d, &core::Deployer::hostKeyUnknown, this, &RunController::hostKeyQuestion);
    connect(d, &core::Deployer::passwordRequested, this, &RunController::passwordQuestion);
    connect(d, &core::Deployer::stopped, d, &QObject::deleteLater);
    return d;
}

void RunController::startRemote(const core::JobRequest &request, const core::ClusterSpec &cluster)
{
    if (isActive() || m_deployer)
        return;
    m_request = request;
    m_paused = false;
    m_left = false;
    m_attachPoint.reset();
    m_secret = protocol::handshake::makeSecret();
    m_deployer = makeDeployer(cluster);
    QJsonArray hosts;
    for (const core::ClusterHost &h : cluster.hosts)
        hosts.append(h.name);
    prepareRecording(QJsonObject{{"kind", "ssh"}, {"workers", int(cluster.hosts.size())}, {"hosts", hosts}});
    connect(m_deployer, &core::Deployer::failed, this, [this](const QString &reason) {
        fail(tr("Deployment failed: %1").arg(reason));
    });
    connect(m_deployer, &core::Deployer::deployed, this, [this](const QList<core::AgentEndpoint> &endpoints) {
        const QString rank0 = endpoints.value(0).host;
        const int configured = m_deployer->cluster().rendezvousPort;
        const quint16 port = configured > 0 ? quint16(configured)
            : QHostAddress(rank0).isLoopback() ? core::pickFreePort(rank0)
                                               : quint16(kDefaultRendezvousPort);
        keepAttachPoint({.agents = endpoints, .rendezvousHost = rank0, .rendezvousPort = port,
                         .graceS = core::RemoteAgent::kGraceS});
        m_session.start(m_request.spec, endpoints, m_secret, rank0, port);
        setPhase(Phase::Running);
        Q_EMIT runStarted(int(endpoints.size()));
    });
    setPhase(Phase::StartingAgents);
    Q_EMIT message(tr("Deploying agents to %1 machines…").arg(cluster.hosts.size()));
    m_deployer->deploy(m_secret);
}

void RunController::prepareRecording(const QJsonObject &cluster, QString runDir)
{
    if (!m_store.isOpen() && !m_store.open(core::RunStore::defaultPath(), core::RunStore::Mode::ReadWrite)) {
        Q_EMIT message(tr("Not recording this run: %1").arg(m_store.errorString()));
        return;
    }
    if (!m_recorderAttached) {
        m_recorder.attach(&m_session);
        m_recorderAttached = true;
    }
    m_recorder.setCluster(cluster);
    if (runDir.isEmpty()) {
        runDir = core::RunStore::defaultRunsDir() + QStringLiteral("/")
            + QDateTime::currentDateTime().toString(QStringLiteral("yyyyMMdd-HHmmss-")) + m_request.spec.strategy;
        if (!QDir().mkpath(runDir)) {
            Q_EMIT message(tr("Cannot create the run folder %1; this run cannot be taken over later, nor its model kept.")
                               .arg(runDir));
            runDir.clear();
        }
    }
    m_recorder.setOutDir(runDir);
}

void RunController::keepAttachPoint(core::AttachFile file, QString runDir)
{
    if (!runDir.isEmpty())
        m_recorder.setOutDir(runDir);
    runDir = m_recorder.outDir();
    if (!m_store.isOpen() || runDir.isEmpty())
        return;  // no stored run to go on recording into, or no folder for the attach point
    file.store = m_store.path();
    file.secret = m_secret;
    m_attachPoint = std::make_unique<core::AttachPoint>(&m_session, &m_recorder, runDir, file);
    connect(m_attachPoint.get(), &core::AttachPoint::writeFailed, this, &RunController::message);
}

void RunController::attachTo(const QString &runDir)
{
    if (isActive() || m_deployer)
        return;
    QString error;
    const auto file = core::AttachFile::read(runDir, &error);
    if (!file)
        return fail(tr("Cannot take the run over: %1").arg(error));
    if (m_store.path() != file->store) {
        m_store.close();
        if (!m_store.open(file->store, core::RunStore::Mode::ReadWrite))
            return fail(tr("Cannot take the run over: %1").arg(m_store.errorString()));
    }
    const auto run = m_store.loadRun(file->runId);
    if (!run)
        return fail(tr("Cannot take the run over: %1").arg(m_store.errorString()));
    prepareRecording(run->info.cluster, runDir);
    m_request = core::JobRequest{run->data.job(), run->data.workers()};
    m_secret = file->secret;
    m_paused = false;
    m_left = false;
    m_session.attach(run->data, file->agents, m_secret, file->rendezvousHost, file->rendezvousPort, file->members,
                     file->generation);
    m_recorder.resume(file->runId, &m_session.data());
    keepAttachPoint(*file, runDir);
    setPhase(Phase::Running);
    Q_EMIT message(tr("Taking over run %1 (%2 workers) from %3…").arg(file->runId).arg(m_request.workers).arg(runDir));
    Q_EMIT runStarted(m_request.workers);
}

bool RunController::canLeaveRunning() const
{
    return m_attachPoint && m_phase == Phase::Running && !m_deployer;
}

void RunController::leaveRunning()
{
    if (!canLeaveRunning())
        return;
    m_recorder.flush();
    m_attachPoint->leave();
    m_left = true;
    if (m_cluster)
        m_cluster->release();
    setPhase(Phase::Idle);
    Q_EMIT message(tr("The run trains on without DLion Studio for up to %1 s; take it over with File → Attach to run.")
                       .arg(m_attachPoint->graceS()));
}

int RunController::graceS() const
{
    return m_attachPoint ? m_attachPoint->graceS() : 0;
}

void RunController::keepFinalModel()
{
    if (m_recorder.outDir().isEmpty())
        return;  // a run without a folder: nothing to export it from later
    QString error;
    const QString path = core::keepFinalModel(m_session.data(), m_recorder.outDir(), &error);
    if (!error.isEmpty())
        Q_EMIT message(tr("The final model was not kept: %1").arg(error));
    else if (!path.isEmpty())
        Q_EMIT message(tr("Final model kept in %1 (File → Export trained model…)").arg(path));
}

QString RunController::runDir() const
{
    return m_attachPoint ? m_attachPoint->runDir() : QString();
}

void RunController::checkDeployment(const core::ClusterSpec &cluster)
{
    if (isActive() || m_deployer)
        return;
    core::Deployer *d = makeDeployer(cluster);
    m_deployer = d;
    connect(d, &core::Deployer::failed, this, [this, d](const QString &reason) {
        m_deployer = nullptr;
        d->deleteLater();
        Q_EMIT deploymentChecked(false, reason);
    });
    connect(d, &core::Deployer::deployed, this, [d] { d->stop(); });
    connect(d, &core::Deployer::stopped, this, [this](bool ok, const QString &text) {
        m_deployer = nullptr;
        Q_EMIT deploymentChecked(ok, ok ? tr("Every machine started the agent and answered; agents removed again.") : text);
    });
    Q_EMIT message(tr("Checking deployment on %1 machines…").arg(cluster.hosts.size()));
    d->deploy(protocol::handshake::makeSecret());
}

void RunController::answerHostKey(const QString &host, bool accept)
{
    if (m_deployer)
        m_deployer->answerHostKey(host, accept);
}

void RunController::answerPassword(const QString &host, const QString &password)
{
    if (m_deployer)
        m_deployer->answerPassword(host, password);
}

void RunController::stop()
{
    if (m_phase == Phase::StartingAgents)
        return fail(tr("Stopped before the run started."));
    if (m_phase != Phase::Running)
        return;
    setPhase(Phase::Stopping);
    Q_EMIT message(tr("Stopping the run…"));
    m_session.stop();
}

void RunController::pause()
{
    if (m_phase == Phase::Running && !m_paused) {
        m_paused = true;
        m_session.pause();
    }
}

void RunController::resume()
{
    if (m_phase == Phase::Running && m_paused) {
        m_paused = false;
        m_session.resume();
    }
}

void RunController::fail(const QString &reason)
{
    releaseAgents();
    setPhase(Phase::Failed);
    Q_EMIT message(reason);
    Q_EMIT ended(false, reason);
}

void RunController::restartWorker(int worker)
{
    if (m_rejoin)
        m_rejoin->restart(worker);
    else
        Q_EMIT message(tr("Only workers of the embedded local cluster can be restarted from here; restart a remote worker's agent on its host."));
}

bool RunController::canRestartWorker(int worker) const
{
    return m_rejoin && m_rejoin->canRestart(worker);
}

void RunController::releaseAgents()
{
    if (m_left)
        return;
    // Agents told to shut down exit on their own (taken-over ones too).
    m_session.shutdownAgents();
    if (m_deployer) {
        // Also removes the remote agents' files; the deployer deletes
        // itself once every host is done.
        m_deployer->stop();
        m_deployer = nullptr;
    }
    if (!m_cluster)
        return;
    // Whatever still runs after a grace period is killed when the cluster
    // is deleted. No blocking wait here: the window stays responsive
    // whatever the agents do.
    m_rejoin.reset();
    core::LocalCluster *cluster = m_cluster.release();
    cluster->setParent(this);
    QTimer::singleShot(kAgentGraceMs, cluster, &QObject::deleteLater);
}

} // namespace dlion::ui
