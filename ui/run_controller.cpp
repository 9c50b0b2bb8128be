#include "run_controller.h"

#include "ui_log.h"

#include <deployer.h>
#include <handshake.h>

namespace dlion::ui {

RunController::RunController(QObject *parent) : QObject(parent)
{
    using core::RunLauncher;
    connect(&m_launcher, &RunLauncher::phaseChanged, this, [this](Phase p) {
        qCInfo(lcUi) << "run phase" << p;
        Q_EMIT phaseChanged(p);
    });
    connect(&m_launcher, &RunLauncher::message, this, &RunController::message);
    connect(&m_launcher, &RunLauncher::runStarted, this, &RunController::runStarted);
    connect(&m_launcher, &RunLauncher::failed, this, [this](const QString &reason) {
        Q_EMIT message(reason);
        Q_EMIT ended(false, reason);
    });
    connect(&m_launcher, &RunLauncher::finished, this, [this](bool ok, const QString &text) {
        Q_EMIT message(ok ? tr("Run finished.") : tr("Run failed: %1").arg(text));
        Q_EMIT ended(ok, text);
    });
}

RunController::~RunController() = default;

void RunController::startLocal(const core::JobRequest &request, int graceS)
{
    if (isActive())
        return;
    m_paused = false;
    Q_EMIT message(tr("Starting %1 local agents…").arg(request.workers));
    core::RunLauncher::Options options;
    options.graceS = graceS;
    m_launcher.startLocal(request, options);
}

void RunController::startOnAgents(const core::JobRequest &request, const QList<core::AgentEndpoint> &agents,
                                  const QByteArray &secret)
{
    if (isActive() || m_check)
        return;
    m_paused = false;
    Q_EMIT message(tr("Connecting to %1 running agents…").arg(agents.size()));
    m_launcher.startOnAgents(request, agents, secret, {});
}

std::unique_ptr<core::Deployer> RunController::makeDeployer(const core::ClusterSpec &cluster)
{
    auto d = std::make_unique<core::Deployer>(cluster);
    d->setHostKeyPolicy(core::Deployer::HostKeyPolicy::Ask);
    connect(d.get(), &core::Deployer::hostProgress, this, &RunController::hostProgress);
    connect(d.get(), &core::Deployer::hostFailed, this, &RunController::hostFailed);
    connect(d.get(), &core::Deployer::hostKeyUnknown, this, &RunController::hostKeyQuestion);
    connect(d.get(), &core::Deployer::passwordRequested, this, &RunController::passwordQuestion);
    return d;
}

void RunController::startRemote(const core::JobRequest &request, const core::ClusterSpec &cluster)
{
    if (isActive() || m_check)
        return;
    m_paused = false;
    Q_EMIT message(tr("Deploying agents to %1 machines…").arg(cluster.hosts.size()));
    m_launcher.startRemote(request, makeDeployer(cluster), QString(), {});
}

void RunController::attachTo(const QString &runDir)
{
    if (isActive() || m_check)
        return;
    m_paused = false;
    m_launcher.attach(runDir);
    if (isActive())
        Q_EMIT message(tr("Taking over run %1 (%2 workers) from %3…").arg(recordedRunId()).arg(request().workers).arg(runDir));
}

void RunController::leaveRunning()
{
    if (!canLeaveRunning())
        return;
    m_launcher.leaveRunning();
    Q_EMIT message(tr("The run trains on without DLion Studio for up to %1 s; take it over with File → Attach to run.")
                       .arg(graceS()));
}

void RunController::checkDeployment(const core::ClusterSpec &cluster)
{
    if (isActive() || m_check)
        return;
    core::Deployer *d = makeDeployer(cluster).release();
    d->setParent(this);
    m_check = d;
    connect(d, &core::Deployer::failed, this, [this, d](const QString &reason) {
        m_check = nullptr;
        d->deleteLater();
        Q_EMIT deploymentChecked(false, reason);
    });
    connect(d, &core::Deployer::deployed, this, [d] { d->stop(); });
    connect(d, &core::Deployer::stopped, this, [this, d](bool ok, const QString &text) {
        m_check = nullptr;
        d->deleteLater();
        Q_EMIT deploymentChecked(ok, ok ? tr("Every machine started the agent and answered; agents removed again.") : text);
    });
    Q_EMIT message(tr("Checking deployment on %1 machines…").arg(cluster.hosts.size()));
    d->deploy(protocol::handshake::makeSecret());
}

core::Deployer *RunController::askingDeployer() const
{
    return m_check ? m_check : m_launcher.deployer();
}

void RunController::answerHostKey(const QString &host, bool accept)
{
    if (core::Deployer *d = askingDeployer())
        d->answerHostKey(host, accept);
}

void RunController::answerPassword(const QString &host, const QString &password)
{
    if (core::Deployer *d = askingDeployer())
        d->answerPassword(host, password);
}

void RunController::stop()
{
    if (phase() == Phase::Running)
        Q_EMIT message(tr("Stopping the run…"));
    m_launcher.stop();
}

void RunController::pause()
{
    if (phase() == Phase::Running && !m_paused) {
        m_paused = true;
        session().pause();
    }
}

void RunController::resume()
{
    if (phase() == Phase::Running && m_paused) {
        m_paused = false;
        session().resume();
    }
}

} // namespace dlion::ui
