#pragma once

#include <control_names.h>

#include <QList>
#include <QObject>

namespace dlion::core {

class LocalCluster;
class RunSession;

// Brings lost workers of a run on the embedded cluster back: restarts the
// worker's agent process, then lets it rejoin the group with the best
// worker's parameters. By hand (`restart`) or automatically some time after
// the loss (`setAutomatic`), at most `maxRestarts` times per worker so an
// agent that keeps dying is not restarted forever.
class LocalRejoin : public QObject {
    Q_OBJECT
public:
    LocalRejoin(LocalCluster *cluster, RunSession *session, QObject *parent = nullptr);

    // True while `worker` is lost from a running job and not already restarting.
    bool canRestart(int worker) const;
    bool restart(int worker);
    // delayMs < 0: off (the default).
    void setAutomatic(int delayMs, int maxRestarts = 3);

Q_SIGNALS:
    void message(const QString &text);

private:
    void onWorkerState(int worker, protocol::WorkerState state);
    void onRestarted(int worker);
    void onAgentExited(int worker, int code);

    LocalCluster *m_cluster;
    RunSession *m_session;
    QList<int> m_restarts;  // per worker
    QList<bool> m_pending;  // agent started, not yet listening
    int m_delayMs = -1;
    int m_maxRestarts = 3;
};

} // namespace dlion::core
