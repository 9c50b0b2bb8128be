#pragma once

#include <job_spec.h>
#include <telemetry.h>

#include <QString>

#include <atomic>
#include <functional>
#include <mutex>
#include <vector>
#include <string>

namespace dlion::engine {

// Callbacks from the training thread. They run on that thread and must be
// quick and thread-safe (the agent queues them for its event loop).
struct WorkerHooks {
    std::function<void(const protocol::RoundRecord &)> round;
    std::function<void(const protocol::EvalRecord &)> eval;
    std::function<void(const protocol::MergeEvent &)> merge;
    std::function<void(const QString &state)> state;  // loading, rendezvous, running, paused
};

struct WorkerResult {
    qint64 rounds = 0;
    double seconds = 0;  // training time, pauses excluded
    qint64 samples = 0;  // computed by this worker
    bool stoppedByRequest = false;
    protocol::EvalRecord finalEval;
};

// One worker of a distributed job: loads its data partition, joins the
// group, and trains round by round under the job's strategy until the budget
// is spent or a stop is requested. Every stop, pause and merge is agreed by
// all workers through a small all-reduce at the top of each round, so they
// leave every collective in step. The request methods are thread-safe.
class Worker {
public:
    Worker(protocol::JobSpec spec, std::string localHost, WorkerHooks hooks);
    ~Worker();

    // Blocking; throws EngineError with a user-facing message.
    WorkerResult run();

    void requestStop() { m_stop = true; }
    void setPaused(bool paused) { m_pause = paused; }
    void requestMerge() { m_merge = true; }
    void setSlowdown(double factor) { m_slowdown = factor < 1 ? 1 : factor; }
    // Caps this worker's outgoing link to `peer` (Mbit/s, 0 = uncapped).
    void setLinkCap(int peer, double mbps);

private:
    protocol::JobSpec m_spec;
    std::string m_localHost;
    WorkerHooks m_hooks;
    std::atomic<bool> m_stop{false};
    std::atomic<bool> m_pause{false};
    std::atomic<bool> m_merge{false};
    std::atomic<double> m_slowdown{1.0};
    std::mutex m_capMutex;
    std::vector<std::pair<int, double>> m_pendingCaps;  // applied at the next round
};

} // namespace dlion::engine
