#include "local_rejoin.h"

#include "local_cluster.h"
#include "run_session.h"

#include <QTimer>

namespace dlion::core {

LocalRejoin::LocalRejoin(LocalCluster *cluster, RunSession *session, QObject *parent)
    : QObject(parent), m_cluster(cluster), m_session(session), m_restarts(cluster->size(), 0),
      m_pending(cluster->size(), false)
{
    connect(m_session, &RunSession::workerStateChanged, this, &LocalRejoin::onWorkerState);
    connect(m_cluster, &LocalCluster::restarted, this, &LocalRejoin::onRestarted);
    connect(m_cluster, &LocalCluster::agentExited, this, &LocalRejoin::onAgentExited);
}

void LocalRejoin::setAutomatic(int delayMs, int maxRestarts)
{
    m_delayMs = delayMs;
    m_maxRestarts = maxRestarts;
}

bool LocalRejoin::canRestart(int worker) const
{
    return worker >= 0 && worker < m_pending.size() && !m_pending[worker]
        && m_session->state() == RunSession::State::Running && m_session->workerState(worker) == protocol::WorkerState::Lost;
}

bool LocalRejoin::restart(int worker)
{
    if (!canRestart(worker)) {
        Q_EMIT message(tr("worker %1 cannot be restarted now: only a lost worker of a running job can").arg(worker));
        return false;
    }
    m_pending[worker] = true;
    ++m_restarts[worker];
    Q_EMIT message(tr("restarting worker %1's agent").arg(worker));
    m_cluster->restart(worker);
    return true;
}

void LocalRejoin::onWorkerState(int worker, protocol::WorkerState state)
{
    if (m_delayMs < 0 || state != protocol::WorkerState::Lost || worker < 0 || worker >= m_restarts.size())
        return;
    if (m_restarts[worker] >= m_maxRestarts) {
        Q_EMIT message(tr("worker %1 was lost %2 times; not restarting it again").arg(worker).arg(m_restarts[worker] + 1));
        return;
    }
    QTimer::singleShot(m_delayMs, this, [this, worker] {
        if (canRestart(worker))
            restart(worker);
    });
}

void LocalRejoin::onRestarted(int worker)
{
    if (worker < 0 || worker >= m_pending.size() || !m_pending[worker])
        return;
    m_pending[worker] = false;
    if (!m_session->rejoin(worker, m_cluster->endpoints()[worker]))
        m_cluster->kill(worker);  // the run ended meanwhile: nothing to join
}

void LocalRejoin::onAgentExited(int worker, int code)
{
    if (worker < 0 || worker >= m_pending.size() || !m_pending[worker])
        return;
    m_pending[worker] = false;
    Q_EMIT message(tr("worker %1's restarted agent exited (status %2) before it was ready").arg(worker).arg(code));
}

} // namespace dlion::core
