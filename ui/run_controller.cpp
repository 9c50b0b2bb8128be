#include "run_controller.h"

#include "ui_log.h"

#include <deployer.h>
#include <handshake.h>
#include <local_cluster.h>
#include <local_rejoin.h>

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

void RunController::startLocal(const core::JobRequest &request)
{
    if (isActive())
        return;
    if (core::LocalCluster::agentProgram().isEmpty())
        return fail(tr("dlion-agent was not found next to dlion-studio or on PATH; build it or set DLION_AGENT."));
    m_request = request;
    m_paused = false;
    m_secret = protocol::handshake::makeSecret();
    m_cluster = std::make_unique<core::LocalCluster>();
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
        m_session.start(m_request.spec, m_cluster->endpoints(), m_secret, core::LocalCluster::kHost, core::pickFreePort());
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
        m_session.start(m_request.spec, endpoints, m_secret, rank0, port);
        setPhase(Phase::Running);
        Q_EMIT runStarted(int(endpoints.size()));
    });
    setPhase(Phase::StartingAgents);
    Q_EMIT message(tr("Deploying agents to %1 machines…").arg(cluster.hosts.size()));
    m_deployer->deploy(m_secret);
}

void RunController::prepareRecording(const QJsonObject &cluster)
{
    if (!m_store.isOpen()) {
        if (!m_store.open(core::RunStore::defaultPath(), core::RunStore::Mode::ReadWrite)) {
            Q_EMIT message(tr("Not recording this run: %1").arg(m_store.errorString()));
            return;
        }
        m_recorder.attach(&m_session);
    }
    m_recorder.setCluster(cluster);
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
    if (m_deployer) {
        // Stops the remote agents and removes their files; the deployer
        // deletes itself once every host is done.
        m_session.shutdownAgents();
        m_deployer->stop();
        m_deployer = nullptr;
    }
    if (!m_cluster)
        return;
    // Agents told to shut down exit on their own; whatever still runs after
    // a grace period is killed when the cluster is deleted. No blocking wait
    // here: the window stays responsive whatever the agents do.
    m_session.shutdownAgents();
    m_rejoin.reset();
    core::LocalCluster *cluster = m_cluster.release();
    cluster->setParent(this);
    QTimer::singleShot(kAgentGraceMs, cluster, &QObject::deleteLater);
}

} // namespace dlion::ui
