#pragma once

#include "agent_endpoint.h"

#include <QList>
#include <QObject>
#include <QProcess>
#include <QTimer>

namespace dlion::core {

// The embedded micro-cloud: N dlion-agent processes on loopback.
//
// Each agent is started with --listen 127.0.0.1:0 --exit-with-parent and the
// run secret in its environment, as many at a time as there are cores; the
// port it prints is collected. `ready()` fires when all have reported,
// `failed()` once if any cannot start or none becomes ready within the start
// time limit (counted from the start and from each ready agent). The
// agents end with this object (terminate, then kill after a grace period)
// and, through the parent-death signal, with this process.
class LocalCluster : public QObject {
    Q_OBJECT
public:
    explicit LocalCluster(QObject *parent = nullptr);
    ~LocalCluster() override;

    // Where dlion-agent is: $DLION_AGENT, else next to this executable,
    // else on PATH. Empty if not found.
    static QString agentProgram();

    // graceS > 0: agents outlive this process (own session, no parent-death
    // signal) and keep training graceS seconds for a controller to reattach,
    // then stop and exit by themselves. 0 (default): they end with it.
    void setGrace(int graceS) { m_graceS = graceS; }
    int grace() const { return m_graceS; }
    void start(int workers, const QByteArray &secret, int startTimeoutMs = 30000);
    void shutdown(int graceMs = 3000);
    // Lets agents started with a grace period outlive this object and this
    // process: forgets them without stopping them.
    void release();

    // The address agents listen on; it also hosts the rendezvous.
    static constexpr const char *kHost = "127.0.0.1";

    QList<AgentEndpoint> endpoints() const;
    int size() const { return int(m_procs.size()); }
    qint64 pid(int worker) const;
    // Kills one agent (SIGKILL): for tests of worker loss.
    void kill(int worker);
    // Starts a fresh agent for `worker` (after it was lost); `restarted()`
    // fires when it listens, with its new endpoint in endpoints().
    void restart(int worker);

Q_SIGNALS:
    void ready();
    void failed(const QString &reason);
    void agentExited(int worker, int exitCode);
    void restarted(int worker);

private:
    void spawn(int worker);
    void onOutput(int worker);

    QString m_program;
    QProcessEnvironment m_env;
    QList<bool> m_restarting;
    int m_graceS = 0;
    QList<QProcess *> m_procs;
    QList<quint16> m_ports;
    QList<QByteArray> m_stdout;
    int m_ready = 0;
    bool m_failed = false;
    QTimer m_startTimer;
};

} // namespace dlion::core
