#include "run_session.h"

#include <algorithm>

namespace dlion::core {

RunSession::RunSession(QObject *parent) : QObject(parent) {}

void RunSession::setState(State s)
{
    if (m_state == s)
        return;
    m_state = s;
    Q_EMIT stateChanged(s);
}

protocol::WorkerState RunSession::workerState(int worker) const
{
    return m_workerStates.value(worker, protocol::WorkerState::Idle);
}

void RunSession::setWorkerState(int worker, protocol::WorkerState state)
{
    m_workerStates[worker] = state;
    Q_EMIT workerStateChanged(worker, state);
}

void RunSession::start(const protocol::JobSpec &job, const QList<AgentEndpoint> &agents, const QByteArray &secret,
                       const QString &rendezvousHost, quint16 rendezvousPort)
{
    protocol::JobSpec recorded = job;
    recorded.world = int(agents.size());
    RunData data;
    data.reset(recorded, int(agents.size()));
    QList<int> members;
    for (int i = 0; i < agents.size(); ++i)
        members.append(i);
    open(data, agents, secret, rendezvousHost, rendezvousPort, members, 0, false);
}

void RunSession::attach(const RunData &data, const QList<AgentEndpoint> &agents, const QByteArray &secret,
                        const QString &rendezvousHost, quint16 rendezvousPort, const QList<int> &members, int generation)
{
    open(data, agents, secret, rendezvousHost, rendezvousPort, members, generation, true);
}

void RunSession::open(const RunData &data, const QList<AgentEndpoint> &agents, const QByteArray &secret,
                      const QString &rendezvousHost, quint16 rendezvousPort, const QList<int> &members, int generation,
                      bool attaching)
{
    qDeleteAll(m_agents);
    m_agents.clear();
    m_data = data;
    m_job = data.job();
    m_job.world = int(agents.size());
    m_rendezvousHost = rendezvousHost;
    m_rendezvousPort = rendezvousPort;
    m_secret = secret;
    m_failure.clear();
    m_generation = generation;
    m_members = members;
    m_attaching = attaching;
    if (attaching)
        m_data.expectResends();
    m_agentModels.clear();
    for (const AgentEndpoint &a : agents)
        m_agentModels.append(a.model);
    m_workerStates = QList<protocol::WorkerState>(agents.size(), protocol::WorkerState::Connecting);
    m_done = QList<bool>(agents.size(), false);
    m_evalsFrom = QList<qsizetype>(agents.size(), 0);
    m_hasReplica = QList<bool>(agents.size(), true);
    for (int w = 0; w < agents.size(); ++w)
        m_done[w] = !members.contains(w);
    setState(State::Connecting);
    for (int i = 0; i < agents.size(); ++i) {
        AgentConnection *a = connectAgent(i, agents[i]);
        connect(a, &AgentConnection::ready, this, &RunSession::onAgentReady);
        m_agents.append(a);
        a->open();
    }
}

AgentConnection *RunSession::connectAgent(int i, const AgentEndpoint &agent)
{
    auto *a = new AgentConnection(i, agent.host, agent.port, m_secret, this);
    a->setHeartbeatTimeout(m_heartbeatTimeoutMs);
    connect(a, &AgentConnection::telemetry, this, [this, a](const protocol::TelemetryBatch &batch) {
        const qsizetype before = m_data.merges().size();
        m_data.add(batch);
        if (!m_ackAfterCommit)
            a->acknowledgeTelemetry();
        for (qsizetype k = before; k < m_data.merges().size(); ++k)
            Q_EMIT mergeObserved(m_data.merges()[k]);
    });
    connect(a, &AgentConnection::agentStateChanged, this, [this, i](protocol::WorkerState s) {
        m_workerStates[i] = s;
        if (s == protocol::WorkerState::Running)
            m_hasReplica[i] = true;
        if (std::all_of(m_members.begin(), m_members.end(),
                        [this](int w) { return m_workerStates[w] == protocol::WorkerState::Running; }))
            m_failedRendezvous = 0;
        Q_EMIT workerStateChanged(i, s);
    });
    connect(a, &AgentConnection::groupFailed, this,
            [this, i](int generation, const QString &why) { onGroupFailed(i, generation, why); });
    connect(a, &AgentConnection::heartbeat, this, [this, i] { Q_EMIT heartbeat(i); });
    connect(a, &AgentConnection::finished, this, [this, i](const QCborMap &o) { onAgentFinished(i, o); });
    connect(a, &AgentConnection::agentError, this, [this, i](const QString &message) {
        Q_EMIT logMessage(QStringLiteral("worker %1: %2").arg(i).arg(message));
    });
    connect(a, &AgentConnection::lost, this, [this, a](const QString &reason) {
        if (m_agents.value(a->worker()) == a)  // not a connection since replaced by a rejoin
            onAgentLost(a->worker(), reason);
    });
    return a;
}

void RunSession::onAgentReady()
{
    if (m_state != State::Connecting || !std::all_of(m_members.begin(), m_members.end(), [this](int w) {
            return m_agents.value(w) && m_agents[w]->state() == AgentConnection::State::Ready;
        }))
        return;
    if (m_attaching) {
        setState(State::Running);
        Q_EMIT logMessage(QStringLiteral("reattached to %1 workers; they deliver what they buffered meanwhile").arg(m_members.size()));
        return;
    }
    m_data.markStarted();
    for (AgentConnection *a : std::as_const(m_agents)) {
        protocol::JobSpec spec = jobFor(a->worker());
        spec.rendezvousHost = m_rendezvousHost;
        spec.rendezvousPort = m_rendezvousPort;
        a->sendJob(spec.toJson());
    }
    setState(State::Running);
    Q_EMIT logMessage(QStringLiteral("job sent to %1 workers (strategy %2, model %3, dataset %4)")
                          .arg(m_agents.size()).arg(m_job.strategy, m_job.model, m_job.dataset));
}

protocol::JobSpec RunSession::jobFor(int worker) const
{
    protocol::JobSpec spec = m_job;
    spec.rank = worker;
    if (!m_agentModels.value(worker).isEmpty())
        spec.model = m_agentModels[worker];  // the copy uploaded to its host
    return spec;
}

int RunSession::bestMember() const
{
    // The member whose replica scored best at its latest evaluation. A
    // rejoined agent that has not trained yet holds fresh parameters at
    // round 0: taking it as the source would restart the whole group.
    const auto holdsReplica = [this](int w) { return m_members.contains(w) && m_hasReplica[w]; };
    const auto first = std::find_if(m_members.begin(), m_members.end(), holdsReplica);
    int best = first != m_members.end() ? *first : m_members.value(0, 0);
    double bestScore = -1;
    QList<bool> seen(m_agents.size(), false);
    const auto &evals = m_data.evals();
    for (qsizetype k = evals.size() - 1; k >= 0; --k) {
        const int w = evals[k].worker;
        if (!holdsReplica(w) || seen[w] || k < m_evalsFrom[w])
            continue;
        seen[w] = true;
        if (evals[k].accuracy > bestScore) {
            bestScore = evals[k].accuracy;
            best = w;
        }
    }
    return best;
}

protocol::GroupPlan RunSession::nextPlan()
{
    std::sort(m_members.begin(), m_members.end());
    protocol::GroupPlan plan;
    plan.generation = ++m_generation;
    plan.members = m_members;
    plan.source = bestMember();
    // Rank 0 hosts the rendezvous; each generation gets its own port, as
    // the previous group's store may still be shutting down.
    plan.rendezvousHost = m_members.first() == 0 ? m_rendezvousHost : m_agents[m_members.first()]->host();
    plan.rendezvousPort = m_rendezvousPort + m_generation;
    Q_EMIT groupChanged(m_generation, m_members);
    return plan;
}

void RunSession::sendPlan(const protocol::GroupPlan &plan, int except)
{
    const QCborMap args{{QStringLiteral("plan"), QCborMap::fromJsonObject(plan.toJson())}};
    for (int w : std::as_const(m_members)) {
        if (w != except)
            m_agents[w]->sendCommand(protocol::Command::Regroup, args);
    }
}

void RunSession::onAgentFinished(int worker, const QCborMap &outcome)
{
    m_data.setOutcome(worker, outcome);
    m_done[worker] = true;
    setWorkerState(worker, outcome.value("ok").toBool() ? protocol::WorkerState::Finished : protocol::WorkerState::Failed);
    if (!outcome.value("ok").toBool() && m_failure.isEmpty()) {
        m_failure = QStringLiteral("worker %1 failed: %2").arg(worker).arg(outcome.value("message").toString());
        broadcast(protocol::Command::Stop);
    }
    if (std::all_of(m_done.begin(), m_done.end(), [](bool d) { return d; }))
        finish(m_failure.isEmpty(), m_failure);
}

void RunSession::onAgentLost(int worker, const QString &reason)
{
    if (m_state == State::Finished || m_state == State::Failed)
        return;
    if (m_done[worker]) {
        if (!m_members.contains(worker))
            Q_EMIT logMessage(QStringLiteral("worker %1 could not rejoin: %2").arg(worker).arg(reason));
        return;
    }
    m_data.setWorkerLost(worker, reason);
    setWorkerState(worker, protocol::WorkerState::Lost);
    Q_EMIT logMessage(QStringLiteral("worker %1 lost: %2").arg(worker).arg(reason));
    m_done[worker] = true;
    m_members.removeAll(worker);
    if (m_state == State::Connecting) {
        m_failure = QStringLiteral("worker %1 lost: %2").arg(worker).arg(reason);
        return finish(false, m_failure);  // no job was sent: nobody else will report
    }
    if (m_elastic && m_state == State::Running && !m_members.isEmpty()) {
        const protocol::GroupPlan plan = nextPlan();
        sendPlan(plan);
        Q_EMIT logMessage(QStringLiteral("training goes on with %1 workers (group generation %2, parameters from worker %3)")
                              .arg(m_members.size()).arg(plan.generation).arg(plan.source));
    } else {
        if (m_failure.isEmpty())
            m_failure = QStringLiteral("worker %1 lost: %2").arg(worker).arg(reason);
        broadcast(protocol::Command::Stop);
    }
    if (std::all_of(m_done.begin(), m_done.end(), [](bool d) { return d; }))
        finish(m_failure.isEmpty(), m_failure);
}

void RunSession::onGroupFailed(int worker, int generation, const QString &why)
{
    // Later reports of a generation already retried are stale.
    if (m_state != State::Running || generation != m_generation || !m_members.contains(worker))
        return;
    constexpr int kMaxRetries = 5;
    if (++m_failedRendezvous > kMaxRetries) {
        if (m_failure.isEmpty())
            m_failure = QStringLiteral("the workers could not form a group %1 times in a row; the last attempt: worker %2: %3")
                            .arg(kMaxRetries + 1).arg(worker).arg(why);
        Q_EMIT logMessage(m_failure);
        broadcast(protocol::Command::Stop);
        return;
    }
    const protocol::GroupPlan plan = nextPlan();
    sendPlan(plan);
    Q_EMIT logMessage(QStringLiteral("group generation %1 did not form (worker %2: %3); retrying as generation %4 at %5:%6")
                          .arg(generation).arg(worker).arg(why).arg(plan.generation).arg(plan.rendezvousHost)
                          .arg(plan.rendezvousPort));
}

bool RunSession::rejoin(int worker, const AgentEndpoint &agent)
{
    if (m_state != State::Running || worker < 0 || worker >= m_agents.size() || !m_done[worker]
        || m_members.contains(worker) || m_members.isEmpty()) {
        Q_EMIT logMessage(QStringLiteral("worker %1 cannot rejoin now: only a lost worker of a running job can").arg(worker));
        return false;
    }
    m_agents[worker]->deleteLater();
    m_agentModels[worker] = agent.model;
    AgentConnection *a = connectAgent(worker, agent);
    connect(a, &AgentConnection::ready, this, [this, worker] { onRejoinReady(worker); });
    m_agents[worker] = a;
    setWorkerState(worker, protocol::WorkerState::Connecting);
    a->open();
    return true;
}

void RunSession::onRejoinReady(int worker)
{
    if (m_state != State::Running || m_members.isEmpty())
        return;
    m_members.append(worker);
    m_done[worker] = false;
    m_hasReplica[worker] = false;
    m_evalsFrom[worker] = m_data.evals().size();
    m_data.setWorkerLost(worker, QString());
    const protocol::GroupPlan plan = nextPlan();
    protocol::JobSpec spec = jobFor(worker);
    spec.group = plan;
    spec.group.rendezvousHost.clear();
    spec.group.rendezvousPort = 0;
    spec.rendezvousHost = plan.rendezvousHost;
    spec.rendezvousPort = plan.rendezvousPort;
    m_agents[worker]->sendJob(spec.toJson());
    sendPlan(plan, worker);
    Q_EMIT logMessage(QStringLiteral("worker %1 rejoined: %2 workers train on (group generation %3, parameters from worker %4)")
                          .arg(worker).arg(m_members.size()).arg(plan.generation).arg(plan.source));
}

void RunSession::finish(bool ok, const QString &message)
{
    QStringList lost;
    for (int w = 0; w < m_data.workers(); ++w) {
        if (!m_data.lostReason(w).isEmpty())
            lost.append(QString::number(w));
    }
    const QString note = ok && !lost.isEmpty()
        ? QStringLiteral("finished without lost worker(s) %1").arg(lost.join(QStringLiteral(", ")))
        : message;
    m_data.markEnded(ok, note);
    setState(ok ? State::Finished : State::Failed);
    Q_EMIT finished(ok, note);
}

void RunSession::broadcast(protocol::Command cmd, const QCborMap &args)
{
    for (AgentConnection *a : std::as_const(m_agents))
        a->sendCommand(cmd, args);
}

void RunSession::stop()
{
    if (m_state == State::Running)
        setState(State::Stopping);
    broadcast(protocol::Command::Stop);
}

void RunSession::acknowledgeTelemetry()
{
    for (AgentConnection *a : std::as_const(m_agents))
        a->acknowledgeTelemetry();
}

void RunSession::pause() { broadcast(protocol::Command::Pause); }
void RunSession::resume() { broadcast(protocol::Command::Resume); }
void RunSession::mergeNow() { broadcast(protocol::Command::MergeNow); }
void RunSession::shutdownAgents() { broadcast(protocol::Command::Shutdown); }

void RunSession::setLinkCap(int from, int to, double mbps)
{
    if (from >= 0 && from < m_agents.size())
        m_agents[from]->sendCommand(protocol::Command::SetLinkCap, QCborMap{{"peer", to}, {"mbps", mbps}});
}

void RunSession::setSlowdown(int worker, double factor)
{
    if (worker >= 0 && worker < m_agents.size())
        m_agents[worker]->sendCommand(protocol::Command::SetSlowdown, QCborMap{{"value", factor}});
}

} // namespace dlion::core
