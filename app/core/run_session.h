#pragma once

#include "agent_connection.h"
#include "agent_endpoint.h"
#include "run_data.h"

#include <QList>
#include <QObject>

namespace dlion::core {

// One distributed training run driven from the control center.
//
// Connects to every agent, gives each its worker id in the job, relays user
// commands to all of them, and gathers their telemetry into RunData. The run
// ends when every agent has reported its outcome (`finished(true)`), or when
// an agent fails (`finished(false, reason)`), after which the others are
// told to stop.
//
// The session owns the group's membership. When an agent is lost (its
// connection drops or it goes silent), the others are sent the plan of the
// next group generation without it, from the best remaining worker, and
// train on; `rejoin()` brings a restarted agent back the same way. A
// generation whose rendezvous fails (a port taken, a plan that reached a
// worker late) is retried with a fresh one, a few times in a row. Signals
// carry no data the RunData does not hold, so a view can be rebuilt from
// `data()` at any time.
class RunSession : public QObject {
    Q_OBJECT
public:
    enum class State { Idle, Connecting, Running, Stopping, Finished, Failed };
    Q_ENUM(State)

    explicit RunSession(QObject *parent = nullptr);

    // `job` is the template; placement fields are filled per agent. Rank 0's
    // agent hosts the rendezvous at rendezvousHost:rendezvousPort.
    void start(const protocol::JobSpec &job, const QList<AgentEndpoint> &agents, const QByteArray &secret,
               const QString &rendezvousHost, quint16 rendezvousPort);
    // Takes over a running job whose controller went away: connects to its
    // agents without sending a job; they deliver what they buffered.
    // `data` holds what was recorded before; members/generation are the
    // group as last known.
    void attach(const RunData &data, const QList<AgentEndpoint> &agents, const QByteArray &secret,
                const QString &rendezvousHost, quint16 rendezvousPort, const QList<int> &members, int generation);
    void stop();
    void pause();
    void resume();
    void mergeNow();
    void setSlowdown(int worker, double factor);
    // Caps the emulated link from -> to (Mbit/s, 0 = uncapped).
    void setLinkCap(int from, int to, double mbps);
    // Asks every agent process to exit (after its job ends).
    void shutdownAgents();
    // Brings lost `worker` back on the (re)started agent at `agent`. It
    // joins the next group generation with the best worker's parameters.
    // Returns false, with a log message, when the run cannot take it now.
    bool rejoin(int worker, const AgentEndpoint &agent);
    // On: agents keep their telemetry until acknowledgeTelemetry(), called
    // once it is stored (RunRecorder::attach does both). Off (the default):
    // it is acknowledged on arrival.
    void setAckAfterCommit(bool on) { m_ackAfterCommit = on; }
    void acknowledgeTelemetry();
    // Off: losing a worker stops the whole run instead of regrouping.
    void setElastic(bool on) { m_elastic = on; }
    // How long an agent may stay silent before it counts as lost (for agents
    // connected after the call).
    void setHeartbeatTimeout(int ms) { m_heartbeatTimeoutMs = ms; }
    // The workers training now, and the generation of their group.
    const QList<int> &members() const { return m_members; }
    int generation() const { return m_generation; }
    // Whether this run was taken over by attach() rather than started here.
    bool isTakeover() const { return m_attaching; }

    State state() const { return m_state; }
    const RunData &data() const { return m_data; }
    // Idle for a worker the run does not have.
    protocol::WorkerState workerState(int worker) const;

Q_SIGNALS:
    void stateChanged(dlion::core::RunSession::State state);
    void workerStateChanged(int worker, dlion::protocol::WorkerState state);
    void heartbeat(int worker);
    void mergeObserved(const dlion::protocol::MergeEvent &event);
    void logMessage(const QString &message);
    void groupChanged(int generation, const QList<int> &members);
    void finished(bool ok, const QString &message);

private:
    void setState(State s);
    void open(const RunData &data, const QList<AgentEndpoint> &agents, const QByteArray &secret, const QString &rendezvousHost,
              quint16 rendezvousPort, const QList<int> &members, int generation, bool attaching);
    void broadcast(protocol::Command cmd, const QCborMap &args = {});
    void setWorkerState(int worker, protocol::WorkerState state);
    AgentConnection *connectAgent(int worker, const AgentEndpoint &agent);
    // The job for `worker`'s agent, less its group and rendezvous.
    protocol::JobSpec jobFor(int worker) const;
    void onAgentReady();
    void onRejoinReady(int worker);
    protocol::GroupPlan nextPlan();
    void sendPlan(const protocol::GroupPlan &plan, int except = -1);
    int bestMember() const;
    void onAgentFinished(int worker, const QCborMap &outcome);
    void onAgentLost(int worker, const QString &reason);
    void onGroupFailed(int worker, int generation, const QString &why);
    void finish(bool ok, const QString &message);

    State m_state = State::Idle;
    protocol::JobSpec m_job;
    QList<AgentConnection *> m_agents;
    QList<QString> m_agentModels;  // per worker: AgentEndpoint::model
    QList<protocol::WorkerState> m_workerStates;
    QList<bool> m_done;
    // Per worker: the index into m_data.evals() from which its evaluations
    // score its current replica (a rejoined agent's earlier ones scored a
    // replica that died with it), and whether it holds a trained replica
    // at all (a rejoined agent does once it has trained in a group).
    QList<qsizetype> m_evalsFrom;
    QList<bool> m_hasReplica;
    RunData m_data;
    QString m_rendezvousHost;
    quint16 m_rendezvousPort = 0;
    QString m_failure;
    QByteArray m_secret;
    QList<int> m_members;  // in rank order
    int m_generation = 0;
    int m_failedRendezvous = 0;  // generations in a row that never formed
    bool m_elastic = true;
    int m_heartbeatTimeoutMs = AgentConnection::kDefaultHeartbeatTimeoutMs;
    bool m_attaching = false;
    bool m_ackAfterCommit = false;
};

} // namespace dlion::core
