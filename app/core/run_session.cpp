#include "run_session.h"

namespace dlion::core {

RunSession::RunSession(QObject *parent) : QObject(parent) {}

void RunSession::setState(State s)
{
    if (m_state == s)
        return;
    m_state = s;
    Q_EMIT stateChanged(s);
}

QString RunSession::workerState(int worker) const
{
    return worker >= 0 && worker < m_workerStates.size() ? m_workerStates[worker] : QString();
}

void RunSession::start(const protocol::JobSpec &job, const QList<AgentEndpoint> &agents, const QByteArray &secret,
                       const QString &rendezvousHost, quint16 rendezvousPort)
{
    qDeleteAll(m_agents);
    m_agents.clear();
    m_job = job;
    m_job.world = int(agents.size());
    m_rendezvousHost = rendezvousHost;
    m_rendezvousPort = rendezvousPort;
    m_failure.clear();
    m_workerStates = QStringList(agents.size(), QStringLiteral("connecting"));
    m_done = QList<bool>(agents.size(), false);
    m_data.reset(m_job, int(agents.size()));
    setState(State::Connecting);
    for (int i = 0; i < agents.size(); ++i) {
        auto *a = new AgentConnection(i, agents[i].host, agents[i].port, secret, this);
        connect(a, &AgentConnection::ready, this, &RunSession::onAgentReady);
        connect(a, &AgentConnection::telemetry, this, [this](const protocol::TelemetryBatch &batch) {
            const qsizetype before = m_data.merges().size();
            m_data.add(batch);
            for (qsizetype k = before; k < m_data.merges().size(); ++k)
                Q_EMIT mergeObserved(m_data.merges()[k]);
            Q_EMIT telemetryArrived();
        });
        connect(a, &AgentConnection::agentStateChanged, this, [this, i](const QString &s) {
            m_workerStates[i] = s;
            Q_EMIT workerStateChanged(i, s);
        });
        connect(a, &AgentConnection::heartbeat, this, [this, i] { Q_EMIT heartbeat(i); });
        connect(a, &AgentConnection::finished, this, [this, i](const QCborMap &o) { onAgentFinished(i, o); });
        connect(a, &AgentConnection::agentError, this, [this, i](const QString &message) {
            Q_EMIT logMessage(QStringLiteral("worker %1: %2").arg(i).arg(message));
        });
        connect(a, &AgentConnection::lost, this, [this, i](const QString &reason) { onAgentLost(i, reason); });
        m_agents.append(a);
        a->open();
    }
}

void RunSession::onAgentReady()
{
    if (!std::all_of(m_agents.begin(), m_agents.end(),
                     [](AgentConnection *a) { return a->state() == AgentConnection::State::Ready; }))
        return;
    m_data.markStarted();
    for (AgentConnection *a : std::as_const(m_agents)) {
        protocol::JobSpec spec = m_job;
        spec.rank = a->worker();
        spec.rendezvousHost = m_rendezvousHost;
        spec.rendezvousPort = m_rendezvousPort;
        a->sendJob(spec.toJson());
    }
    setState(State::Running);
    Q_EMIT logMessage(QStringLiteral("job sent to %1 workers (strategy %2, model %3, dataset %4)")
                          .arg(m_agents.size()).arg(m_job.strategy, m_job.model, m_job.dataset));
}

void RunSession::onAgentFinished(int worker, const QCborMap &outcome)
{
    m_data.setOutcome(worker, outcome);
    m_done[worker] = true;
    m_workerStates[worker] = outcome.value("ok").toBool() ? QStringLiteral("finished") : QStringLiteral("failed");
    Q_EMIT workerStateChanged(worker, m_workerStates[worker]);
    if (!outcome.value("ok").toBool() && m_failure.isEmpty()) {
        m_failure = QStringLiteral("worker %1 failed: %2").arg(worker).arg(outcome.value("message").toString());
        broadcast(QStringLiteral("stop"));
    }
    if (std::all_of(m_done.begin(), m_done.end(), [](bool d) { return d; }))
        finish(m_failure.isEmpty(), m_failure);
}

void RunSession::onAgentLost(int worker, const QString &reason)
{
    if (m_state == State::Finished || m_state == State::Failed || m_done[worker])
        return;
    m_data.setWorkerLost(worker, reason);
    m_workerStates[worker] = QStringLiteral("lost");
    Q_EMIT workerStateChanged(worker, m_workerStates[worker]);
    Q_EMIT logMessage(QStringLiteral("worker %1 lost: %2").arg(worker).arg(reason));
    if (m_failure.isEmpty())
        m_failure = QStringLiteral("worker %1 lost: %2").arg(worker).arg(reason);
    m_done[worker] = true;
    if (m_state == State::Connecting)
        return finish(false, m_failure);  // no job was sent: nobody else will report
    broadcast(QStringLiteral("stop"));
    if (std::all_of(m_done.begin(), m_done.end(), [](bool d) { return d; }))
        finish(false, m_failure);
}

void RunSession::finish(bool ok, const QString &message)
{
    m_data.markEnded(ok, message);
    setState(ok ? State::Finished : State::Failed);
    Q_EMIT finished(ok, message);
}

void RunSession::broadcast(const QString &cmd, const QCborMap &args)
{
    for (AgentConnection *a : std::as_const(m_agents))
        a->sendCommand(cmd, args);
}

void RunSession::stop()
{
    if (m_state == State::Running)
        setState(State::Stopping);
    broadcast(QStringLiteral("stop"));
}

void RunSession::pause() { broadcast(QStringLiteral("pause")); }
void RunSession::resume() { broadcast(QStringLiteral("resume")); }
void RunSession::mergeNow() { broadcast(QStringLiteral("merge_now")); }
void RunSession::shutdownAgents() { broadcast(QStringLiteral("shutdown")); }

void RunSession::setLinkCap(int from, int to, double mbps)
{
    if (from >= 0 && from < m_agents.size())
        m_agents[from]->sendCommand(QStringLiteral("set_link_cap"), QCborMap{{"peer", to}, {"mbps", mbps}});
}

void RunSession::setSlowdown(int worker, double factor)
{
    if (worker >= 0 && worker < m_agents.size())
        m_agents[worker]->sendCommand(QStringLiteral("set_slowdown"), QCborMap{{"value", factor}});
}

} // namespace dlion::core
