#pragma once

#include <control_names.h>
#include <job_spec.h>
#include <telemetry.h>

#include <QByteArray>
#include <QString>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace dlion::engine {

class Checkpointer;
class Comm;
class ComputePacer;
class LinkEmulator;
class Mailbox;
class Strategy;
class Trainer;
struct RoundContext;

// Callbacks from the training thread. They run on that thread and must be
// quick and thread-safe (the agent queues them for its event loop).
struct WorkerHooks {
    std::function<void(const protocol::RoundRecord &)> round;
    std::function<void(const protocol::EvalRecord &)> eval;
    std::function<void(const protocol::MergeEvent &)> merge;
    // Once, when the worker has loaded its data.
    std::function<void(const protocol::DataSummary &)> data;
    // Loading, Rendezvous, Running, Paused, Waiting (its budget spent, for
    // its peers to spend theirs), Regrouping
    std::function<void(protocol::WorkerState state)> state;
    // A problem training goes on despite (a failed checkpoint write).
    std::function<void(const QString &message)> warning;
    // Group generation `generation` never formed (its rendezvous or first
    // broadcast failed); the worker now waits for a newer plan.
    std::function<void(int generation, const QString &why)> groupFailed;
};

// The model a run ends with, as the files Python loads.
struct FinalModel {
    QByteArray bytes;  // TorchScript (Model::torchScript); empty: this worker does not report the run's model
    QByteArray sha256;  // hex, of `bytes`
    QByteArray stateDict;  // a built-in model's state_dict (Model::stateDict); empty for a TorchScript model
    QByteArray stateDictSha256;  // hex, of `stateDict`; empty without one
    qint64 parameters = 0;
    std::vector<std::int64_t> inputShape;  // per sample: C, H, W, or features for tabular data
    double accuracy = 0;  // on the test subset, as the run reported it
};

struct WorkerResult {
    qint64 rounds = 0;
    double seconds = 0;  // training time, pauses excluded
    qint64 samples = 0;  // computed by this worker
    bool stoppedByRequest = false;
    protocol::EvalRecord finalEval;
    FinalModel model;  // from the worker that reports the final evaluation
};

// One worker of a distributed job: loads its data partition, joins the
// group, and trains round by round under the job's strategy until the budget
// is spent or a stop is requested. Under all-reduce every stop, pause and
// merge is agreed by all workers through a small all-reduce at the top of
// each round, so they leave every collective in step. Under the other
// strategies control rows travel as messages beside the strategy's own
// and no round waits on a collective (see trainByMessages). The request
// methods are thread-safe.
//
// The group is elastic. When a peer dies, every collective fails within
// the timeout (or at once, on an abort); the worker then waits for the
// controller's plan of the next group generation, joins it, adopts the
// parameters and progress of the plan's source worker, and trains on.
// A restarted worker joins the same way, through a plan that lists it.
// Telemetry always names workers by id (JobSpec::rank), never by the rank
// they hold in the current group.
class Worker {
public:
    // `localHost`: the address this worker's data plane binds to (empty:
    // the host's default); `secret`: the run secret its peers share.
    Worker(protocol::JobSpec spec, std::string localHost, QByteArray secret, WorkerHooks hooks);
    ~Worker();

    // Blocking; throws EngineError with a user-facing message.
    WorkerResult run();

    void requestStop();
    void setPaused(bool paused) { m_pause = paused; }
    void requestMerge() { m_merge = true; }
    void setSlowdown(double factor) { m_slowdown = factor < 1 ? 1 : factor; }
    // Caps this worker's outgoing link to worker `peer` (Mbit/s, 0 = uncapped).
    void setLinkCap(int peer, double mbps);
    // The next group generation. A plan that drops a current member aborts
    // the collective in progress; one that only adds members takes effect
    // at the top of the next round. Stale generations are ignored.
    void requestRegroup(const protocol::GroupPlan &plan);

private:
    struct Progress;
    class MessageLoop;  // trainByMessages's loop (message_loop.cpp)
    enum class GroupEnd { Finished, Regroup };

    // A Comm for the plan, registered where requestRegroup can abort it.
    std::unique_ptr<Comm> makeComm(const protocol::GroupPlan &plan);
    // Fails the whole group alike when its members built models of
    // different sizes.
    void checkModelSizes(Comm &comm, const protocol::GroupPlan &plan, Trainer &trainer);
    void joinGroup(Comm &comm, const protocol::GroupPlan &plan, Trainer &trainer, LinkEmulator &emulator,
                   Progress &progress);
    // All-reduce: the control slots ride on each round's gradient
    // all-reduce; a group's first round exchanges them alone.
    GroupEnd train(Comm &comm, Trainer &trainer, LinkEmulator &emulator, Progress &progress);
    // Every other strategy: control rows travel through the Mailbox, and
    // no call waits on a collective until the final evaluation.
    GroupEnd trainByMessages(Comm &comm, Trainer &trainer, LinkEmulator &emulator, Progress &progress);
    // One round: compute, the strategy's exchange, the step, telemetry.
    // With a mailbox, the time the round waited on evaluating peers is off
    // the clock.
    void runRound(Strategy &strategy, Trainer &trainer, LinkEmulator &emulator, Progress &progress, ComputePacer &pacer,
                  RoundContext &ctx, const QList<int> &members, Mailbox *mailbox = nullptr);
    // The collective evaluation of every replica (and, when final, of the
    // parameter average).
    protocol::EvalRecord evaluateGroup(Comm &comm, Trainer &trainer, Progress &progress, bool final);
    // The final evaluation, unless the target's evaluation already was.
    GroupEnd finish(Comm &comm, Trainer &trainer, Progress &progress);
    // The time and rounds budgets, each worker's own; the epochs budget,
    // which counts the samples of the whole group.
    // `roundsAhead`: rounds under way, counted as done.
    bool ownBudgetSpent(const Progress &progress, int roundsAhead = 0) const;
    bool epochsSpent(double groupSamples, const Trainer &trainer) const;
    // Reports a strategy's merge, naming workers by id.
    std::function<void(const protocol::MergeEvent &)> mergeHook(const QList<int> &members) const;
    // Blocks until a plan newer than the current generation arrives; nullopt
    // when a stop is requested first. Throws EngineError after the wait.
    std::optional<protocol::GroupPlan> awaitPlan(const std::string &why);
    void retire(std::unique_ptr<Comm> comm);
    // Takes the checkpoint named by resume_from into the trainer and progress.
    void restore(Trainer &trainer, Progress &progress);
    // Writes a checkpoint when one is due; a failure only warns.
    void maybeCheckpoint(Trainer &trainer, Progress &progress);
    void setState(protocol::WorkerState s);

    protocol::JobSpec m_spec;
    std::string m_localHost;
    QByteArray m_secret;
    WorkerHooks m_hooks;
    std::atomic<bool> m_stop{false};
    std::atomic<bool> m_pause{false};
    std::atomic<bool> m_merge{false};
    std::atomic<double> m_slowdown{1.0};
    std::mutex m_capMutex;
    std::vector<std::pair<int, double>> m_pendingCaps;  // applied at the next round

    std::mutex m_groupMutex;
    std::condition_variable m_planArrived;
    std::optional<protocol::GroupPlan> m_nextPlan;
    protocol::GroupPlan m_plan;  // the current group
    Comm *m_comm = nullptr;      // the current group's, to abort
    std::atomic<bool> m_regroupPending{false};
    std::vector<std::thread> m_released;  // broken groups being torn down
    std::unique_ptr<Checkpointer> m_checkpointer;  // null when checkpoints are off
};

} // namespace dlion::engine
