#include "worker.h"

#include "checkpoint.h"
#include "comm.h"
#include "compute_pacer.h"
#include "engine_error.h"
#include "link_emulator.h"
#include "mailbox.h"
#include "rate_meter.h"
#include "strategy.h"
#include "strategy_options.h"
#include "trainer.h"

#include <QLoggingCategory>

#include <torch/utils.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <limits>
#include <numeric>
#include <thread>

Q_LOGGING_CATEGORY(lcEngine, "dlion.engine")

namespace dlion::engine {

namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// How long a worker whose group broke waits for the controller's next plan.
// The controller notices a dead agent at once (its connection drops) or
// after its heartbeat timeout (15 s).
constexpr auto kPlanWait = std::chrono::seconds(30);

// Per-peer vectors come indexed by rank; telemetry indexes them by worker id.
void toWorkerIds(std::vector<double> &v, const QList<int> &members, int world)
{
    if (v.empty())
        return;
    std::vector<double> out(std::size_t(world), 0.0);
    for (std::size_t r = 0; r < v.size() && r < std::size_t(members.size()); ++r)
        out[std::size_t(members[qsizetype(r)])] = v[r];
    v = std::move(out);
}

// This worker's evaluation; the caller fills in the group's figures.
protocol::EvalRecord evalRecord(int worker, qint64 round, double t, const EvalResult &local)
{
    protocol::EvalRecord e;
    e.worker = worker;
    e.round = round;
    e.t = t;
    e.accuracy = local.accuracy();
    e.loss = local.loss();
    return e;
}

// The per-round agreement: each worker writes its slot, a sum all-reduce
// gives everyone every slot. Flags are agreed when any worker raises them.
class ControlExchange {
public:
    enum Slot { Rate, Samples, Stop, Pause, Merge, Eval, Regroup, SlotCount };

    explicit ControlExchange(Comm &comm)
        : m_comm(comm), m_stride(SlotCount + comm.world()), m_buf(torch::zeros({comm.world() * m_stride}, torch::kDouble))
    {}

    // `incoming`: this worker's estimates of its incoming links (bytes/s).
    void exchange(const double (&mine)[SlotCount], const std::vector<double> &incoming)
    {
        m_buf.zero_();
        auto *p = m_buf.data_ptr<double>() + m_comm.rank() * m_stride;
        std::copy(std::begin(mine), std::end(mine), p);
        std::copy(incoming.begin(), incoming.end(), p + SlotCount);
        m_comm.allreduceSum(m_buf);
    }
    double at(int worker, Slot s) const { return m_buf.data_ptr<double>()[worker * m_stride + s]; }
    // n x n matrix of link i -> j bandwidth, as measured by receiver j.
    std::vector<double> bandwidth() const
    {
        const int n = m_comm.world();
        std::vector<double> out(std::size_t(n * n), 0.0);
        for (int j = 0; j < n; ++j) {
            for (int i = 0; i < n; ++i)
                out[std::size_t(i * n + j)] = m_buf.data_ptr<double>()[j * m_stride + SlotCount + i];
        }
        return out;
    }
    bool any(Slot s) const
    {
        for (int w = 0; w < m_comm.world(); ++w) {
            if (at(w, s) > 0)
                return true;
        }
        return false;
    }
    double sum(Slot s) const
    {
        double total = 0;
        for (int w = 0; w < m_comm.world(); ++w)
            total += at(w, s);
        return total;
    }

private:
    Comm &m_comm;
    int m_stride;
    torch::Tensor m_buf;
};

} // namespace

// What carries over from one group generation to the next.
struct Worker::Progress {
    WorkerResult result;
    RateMeter meter;
    Clock::time_point start = Clock::now();
    double offsetS = 0;  // training time adopted from a group's source
    double pausedS = 0;
    double lastEvalT = 0;
    double lastScheduleT = -1;
    double lastCheckpointT = 0;
    bool checkpointFailing = false;  // warn once per run of failures
    double elapsed() const { return offsetS + secondsSince(start) - pausedS; }
    void adopt(double elapsedS)
    {
        start = Clock::now();
        pausedS = 0;
        offsetS = elapsedS;
    }
};

Worker::Worker(protocol::JobSpec spec, std::string localHost, QByteArray secret, WorkerHooks hooks)
    : m_spec(std::move(spec)), m_localHost(std::move(localHost)), m_secret(std::move(secret)), m_hooks(std::move(hooks))
{
    m_slowdown = m_spec.slowdownFor(m_spec.rank);
    m_plan = m_spec.initialGroup();
    if (m_spec.checkpoint.enabled())
        m_checkpointer = std::make_unique<Checkpointer>(m_spec.checkpoint.dir, m_spec.rank, m_spec.checkpoint.keep);
}

Worker::~Worker()
{
    for (auto &t : m_released)
        t.join();
}

void Worker::setLinkCap(int peer, double mbps)
{
    std::lock_guard lock(m_capMutex);
    m_pendingCaps.emplace_back(peer, mbps);
}

void Worker::requestRegroup(const protocol::GroupPlan &plan)
{
    std::lock_guard lock(m_groupMutex);
    if (plan.generation <= m_plan.generation || (m_nextPlan && plan.generation <= m_nextPlan->generation))
        return;
    m_nextPlan = plan;
    const bool dropsMember = std::any_of(m_plan.members.begin(), m_plan.members.end(),
                                         [&](int w) { return !plan.members.contains(w); });
    // Only a group that trains can wind down at the top of a round; one
    // still in its rendezvous, or one losing a member, is left at once.
    if (m_comm && (dropsMember || !m_comm->connected()))
        m_comm->abort();
    else
        m_regroupPending = true;
    m_planArrived.notify_all();
}

void Worker::setState(protocol::WorkerState s)
{
    if (m_hooks.state)
        m_hooks.state(s);
}

void Worker::requestStop()
{
    m_stop = true;
    std::lock_guard lock(m_groupMutex);  // a worker awaiting a plan wakes to stop
    m_planArrived.notify_all();
}

std::optional<protocol::GroupPlan> Worker::awaitPlan(const std::string &why)
{
    std::unique_lock lock(m_groupMutex);
    if (!m_planArrived.wait_for(lock, kPlanWait, [this] { return m_nextPlan || m_stop; }))
        throw EngineError(why + "; no new group was formed within "
                          + std::to_string(std::chrono::seconds(kPlanWait).count())
                          + " s (is the control center attached?)");
    if (m_stop)
        return std::nullopt;
    m_plan = *m_nextPlan;
    m_nextPlan.reset();
    m_regroupPending = false;
    return m_plan;
}

void Worker::retire(std::unique_ptr<Comm> comm)
{
    if (!comm)
        return;
    {
        std::lock_guard lock(m_groupMutex);
        m_comm = nullptr;
    }
    m_released.push_back(comm->release());
}

void Worker::restore(Trainer &trainer, Progress &progress)
{
    const QString path = Checkpoint::latest(m_spec.resumeFrom, m_spec.rank);
    const Checkpoint c = Checkpoint::load(path);
    const auto n = std::size_t(trainer.parameterCount());
    if (c.model != m_spec.model || c.params.size() != n)
        throw EngineError(QStringLiteral("checkpoint %1 holds model \"%2\" with %3 parameters; this job trains \"%4\" with %5")
                              .arg(path, c.model).arg(c.params.size()).arg(m_spec.model).arg(n).toStdString());
    std::memcpy(trainer.flatParams().data_ptr<float>(), c.params.data(), n * sizeof(float));
    std::memcpy(trainer.flatMomentum().data_ptr<float>(), c.momentum.data(), n * sizeof(float));
    progress.result.rounds = c.round;
    trainer.setRound(c.round);
    progress.adopt(c.elapsedS);
    progress.lastEvalT = c.elapsedS;
    progress.lastCheckpointT = c.elapsedS;
    qCInfo(lcEngine).noquote() << "worker" << m_spec.rank << "resumes from" << path << "at round" << c.round;
}

void Worker::maybeCheckpoint(Trainer &trainer, Progress &progress)
{
    if (!m_checkpointer || progress.elapsed() - progress.lastCheckpointT < m_spec.checkpoint.intervalS)
        return;
    progress.lastCheckpointT = progress.elapsed();
    Checkpoint c;
    c.model = m_spec.model;
    c.worker = m_spec.rank;
    c.round = progress.result.rounds;
    c.elapsedS = progress.lastCheckpointT;
    const float *p = trainer.flatParams().data_ptr<float>();
    const float *m = trainer.flatMomentum().data_ptr<float>();
    c.params.assign(p, p + trainer.parameterCount());
    c.momentum.assign(m, m + trainer.parameterCount());
    const QString error = m_checkpointer->save(c);
    if (error.isEmpty()) {
        if (progress.checkpointFailing)
            qCInfo(lcEngine) << "worker" << m_spec.rank << "writes checkpoints again";
        progress.checkpointFailing = false;
        return;
    }
    if (!progress.checkpointFailing) {
        qCWarning(lcEngine).noquote() << "worker" << m_spec.rank << error;
        if (m_hooks.warning)
            m_hooks.warning(error + QStringLiteral("; training goes on and the previous checkpoint stays"));
    }
    progress.checkpointFailing = true;
}

std::unique_ptr<Comm> Worker::makeComm(const protocol::GroupPlan &plan)
{
    Comm::Options co;
    co.rendezvousHost = plan.rendezvousHost.toStdString();
    co.rendezvousPort = plan.rendezvousPort;
    co.localHost = m_localHost;
    co.secret = m_secret;
    co.rank = plan.rankOf(m_spec.rank);
    co.world = int(plan.members.size());
    const StrategyOptions knobs(m_spec.strategyOptions, m_spec.strategy);
    co.timeout = std::chrono::milliseconds(qint64(knobs.number("timeout_s") * 1000));
    auto comm = std::make_unique<Comm>(co);
    std::lock_guard lock(m_groupMutex);
    m_comm = comm.get();
    if (m_nextPlan)  // a plan that arrived meanwhile supersedes this one
        comm->abort();
    return comm;
}

void Worker::joinGroup(Comm &comm, const protocol::GroupPlan &plan, Trainer &trainer, LinkEmulator &emulator,
                       Progress &progress)
{
    setState(protocol::WorkerState::Rendezvous);
    comm.connect();
    emulator.setGroup(std::vector<int>(plan.members.begin(), plan.members.end()));
    // Every member starts from the source's replica and progress: identical
    // replicas at the start, the best one's after a regroup.
    const int source = plan.rankOf(plan.source);
    comm.broadcast(trainer.flatParams(), source);
    comm.broadcast(trainer.flatMomentum(), source);
    auto shared = torch::tensor({double(progress.result.rounds), progress.elapsed(), progress.lastEvalT}, torch::kDouble);
    comm.broadcast(shared, source);
    progress.result.rounds = qint64(shared[0].item<double>());
    trainer.setRound(progress.result.rounds);
    progress.adopt(shared[1].item<double>());
    progress.lastEvalT = shared[2].item<double>();
    // From here on every collective pays its emulated links; forming the
    // group (above) is setup and is not charged.
    comm.setPacing({[&emulator, &progress](double bytes) {
                        const LinkEmulator::PacerScope pacer;
                        return emulator.allreduceSeconds(bytes, progress.elapsed());
                    },
                    [&emulator, &progress](int root, const std::vector<int> &receivers, double bytes) {
                        const LinkEmulator::PacerScope pacer;
                        return emulator.broadcastSeconds(root, receivers, bytes, progress.elapsed());
                    }});
    if (plan.generation > 0)
        qCInfo(lcEngine) << "worker" << m_spec.rank << "joined group generation" << plan.generation << "as rank"
                         << comm.rank() << "of" << comm.world();
}

WorkerResult Worker::run()
{
    torch::set_num_threads(m_spec.threads);
    if (m_spec.device != QLatin1String("cpu"))
        throw EngineError("device \"" + m_spec.device.toStdString() + "\" is not available: this build of the engine "
                          "uses a CPU-only LibTorch");

    LinkEmulator emulator(m_spec.emulation, m_spec.world);
    setState(protocol::WorkerState::Loading);
    Trainer trainer(m_spec);
    qCInfo(lcEngine) << "worker" << m_spec.rank << "holds" << trainer.localTrainSize() << "training samples,"
                     << trainer.parameterCount() << "parameters";

    Progress progress;
    // Every worker restores its own file, then the first group adopts the
    // source's restored state like any fresh start does.
    if (!m_spec.resumeFrom.isEmpty())
        restore(trainer, progress);
    protocol::GroupPlan plan = m_plan;
    // One pass per group generation; each further pass needs a new plan
    // from the controller within kPlanWait, or the worker gives up.
    for (;;) {
        std::unique_ptr<Comm> comm = makeComm(plan);
        std::string why = "the group was re-formed";
        bool formed = false;
        try {
            joinGroup(*comm, plan, trainer, emulator, progress);
            formed = true;
            const GroupEnd end = exchangesMessages(m_spec.strategy) ? trainByMessages(*comm, trainer, emulator, progress)
                                                                 : train(*comm, trainer, emulator, progress);
            if (end == GroupEnd::Finished) {
                retire(std::move(comm));
                break;
            }
        } catch (const GroupBrokenError &e) {
            why = e.what();
            qCWarning(lcEngine).noquote() << "worker" << m_spec.rank << "lost its group:" << QString::fromStdString(why);
            // The controller retries a generation that never formed with a
            // fresh rendezvous; one that trained and broke lost a member,
            // which the controller sees by itself.
            if (!formed && m_hooks.groupFailed)
                m_hooks.groupFailed(plan.generation, QString::fromStdString(why));
        }
        retire(std::move(comm));
        setState(protocol::WorkerState::Regrouping);
        const auto next = awaitPlan(why);
        if (!next) {
            // Stopped while no group exists: report this replica alone.
            const EvalResult local = trainer.evaluate();
            auto &e = progress.result.finalEval;
            e = evalRecord(m_spec.rank, progress.result.rounds, progress.elapsed(), local);
            e.globalAccuracy = e.minAccuracy = e.maxAccuracy = e.consensusAccuracy = e.accuracy;
            e.globalLoss = e.loss;
            e.samples = int(local.count);
            e.final = true;
            e.primary = true;
            if (m_hooks.eval)
                m_hooks.eval(e);
            break;
        }
        plan = *next;
    }
    progress.result.stoppedByRequest = m_stop;
    progress.result.seconds = progress.elapsed();
    qCInfo(lcEngine) << "worker" << m_spec.rank << "finished after" << progress.result.rounds << "rounds, accuracy"
                     << progress.result.finalEval.globalAccuracy;
    return progress.result;
}

protocol::EvalRecord Worker::evaluateGroup(Comm &comm, Trainer &trainer, Progress &progress, bool final)
{
    // Every replica on the same test subset; at the end also the
    // parameter-averaged model, each rank scoring a 1/n shard of the subset
    // with it (only then: on real links the model crossing every link at
    // each evaluation would take the training's bandwidth). This is the
    // experimenter's measurement, not training: its time is taken off the
    // training clock and its collectives are not paced, for every strategy
    // alike.
    const int rank = comm.rank(), world = comm.world();
    const double t = progress.elapsed();
    const auto started = Clock::now();
    const EvalResult local = trainer.evaluate();
    EvalResult shard;
    if (final) {
        torch::Tensor consensus = trainer.flatParams().clone();
        comm.allreduceSum(consensus, Comm::Pace::Free);
        consensus.div_(world);
        shard = trainer.evaluateWith(consensus, rank, world);
    }
    auto all = torch::zeros({2 * world + 3}, torch::kDouble);
    auto *s = all.data_ptr<double>();
    s[rank] = local.accuracy();
    s[world + rank] = local.loss();
    s[2 * world] = double(shard.correct);
    s[2 * world + 1] = double(shard.count);
    comm.allreduceSum(all, Comm::Pace::Free);
    protocol::EvalRecord e = evalRecord(m_spec.rank, progress.result.rounds, t, local);
    e.minAccuracy = *std::min_element(s, s + world);
    e.maxAccuracy = *std::max_element(s, s + world);
    e.globalAccuracy = std::accumulate(s, s + world, 0.0) / world;
    e.globalLoss = std::accumulate(s + world, s + 2 * world, 0.0) / world;
    e.consensusAccuracy = s[2 * world + 1] > 0 ? s[2 * world] / s[2 * world + 1] : 0;
    e.samples = int(local.count);
    e.final = final;
    e.primary = rank == 0;
    progress.pausedS += secondsSince(started);
    return e;
}

bool Worker::ownBudgetSpent(const Progress &progress) const
{
    const auto &budget = m_spec.budget;
    return (budget.seconds > 0 && progress.elapsed() >= budget.seconds)
        || (budget.maxRounds > 0 && progress.result.rounds >= budget.maxRounds);
}

bool Worker::epochsSpent(double groupSamples, const Trainer &trainer) const
{
    return m_spec.budget.epochs > 0 && groupSamples >= m_spec.budget.epochs * double(trainer.globalTrainSize());
}

void Worker::runRound(Strategy &strategy, Trainer &trainer, LinkEmulator &emulator, Progress &progress,
                      ComputePacer &pacer, RoundContext &ctx, const QList<int> &members, Mailbox *mailbox)
{
    const int id = m_spec.rank;
    WorkerResult &result = progress.result;
    {
        std::lock_guard lock(m_capMutex);
        for (const auto &[peer, mbps] : m_pendingCaps)
            emulator.setCap(id, peer, mbps);
        m_pendingCaps.clear();
    }
    double scheduled = 1;
    if (emulator.scheduledSlowdown(id, progress.lastScheduleT, progress.elapsed(), &scheduled))
        m_slowdown = scheduled;
    progress.lastScheduleT = progress.elapsed();

    protocol::RoundRecord rec;
    rec.worker = id;
    rec.round = result.rounds;
    ctx.round = result.rounds;
    ctx.elapsedS = progress.elapsed();
    ctx.record = &rec;

    const std::int64_t batch = strategy.localBatch(ctx);
    const double factor = m_slowdown;
    pacer.begin();
    rec.loss = trainer.computeGradient(batch);
    const double computeS = pacer.end(factor);
    progress.meter.add(double(batch), computeS);

    const auto t1 = Clock::now();
    strategy.exchange(trainer.flatGrad(), ctx);
    rec.commS = secondsSince(t1);
    trainer.step();
    const auto t2 = Clock::now();
    strategy.afterStep(ctx);
    rec.commS += secondsSince(t2);
    if (mailbox) {
        const double frozenS = mailbox->takeWaitedOnEvaluationS();
        progress.pausedS += frozenS;
        rec.commS = std::max(0.0, rec.commS - frozenS);
    }

    rec.t = progress.elapsed();
    rec.batch = int(batch);
    rec.share = double(batch) / double(m_spec.batchSize * int(members.size()));
    rec.rate = progress.meter.rate();
    rec.computeS = computeS;
    rec.slowdown = factor;
    if (m_spec.verifyReplicas)
        rec.paramDigest = trainer.parameterDigest();
    for (auto *v : {&rec.linkBytes, &rec.linkMbps, &rec.linkFraction})
        toWorkerIds(*v, members, m_spec.world);
    result.samples += batch;
    ++result.rounds;
    if (m_hooks.round)
        m_hooks.round(rec);
    maybeCheckpoint(trainer, progress);
}

Worker::GroupEnd Worker::train(Comm &comm, Trainer &trainer, LinkEmulator &emulator, Progress &progress)
{
    const int rank = comm.rank();
    const int world = comm.world();
    const QList<int> members = m_plan.members;
    auto strategy = makeStrategy(m_spec, trainer, comm, emulator, nullptr);
    ControlExchange control(comm);
    ComputePacer pacer(m_spec.threads);
    WorkerResult &result = progress.result;

    auto exchangeControl = [&] {
        double mine[ControlExchange::SlotCount] = {};
        mine[ControlExchange::Rate] = progress.meter.rate();
        mine[ControlExchange::Samples] = double(result.samples);
        mine[ControlExchange::Stop] = m_stop ? 1 : 0;
        mine[ControlExchange::Pause] = m_pause ? 1 : 0;
        mine[ControlExchange::Merge] = m_merge.exchange(false) ? 1 : 0;
        mine[ControlExchange::Regroup] = m_regroupPending ? 1 : 0;
        if (rank == 0) {
            if (ownBudgetSpent(progress) || epochsSpent(control.sum(ControlExchange::Samples), trainer))
                mine[ControlExchange::Stop] = 1;
            mine[ControlExchange::Eval] = progress.elapsed() - progress.lastEvalT >= m_spec.evalIntervalS ? 1 : 0;
        }
        control.exchange(mine, strategy->incomingBandwidth());
    };

    setState(protocol::WorkerState::Running);
    // Bounded by the budget, which the job spec guarantees is set.
    for (;;) {
        exchangeControl();
        if (control.any(ControlExchange::Stop))
            break;
        if (control.any(ControlExchange::Regroup))
            return GroupEnd::Regroup;
        if (control.any(ControlExchange::Pause)) {
            setState(protocol::WorkerState::Paused);
            const auto pauseStart = Clock::now();
            while (control.any(ControlExchange::Pause) && !control.any(ControlExchange::Stop)
                   && !control.any(ControlExchange::Regroup)) {
                std::this_thread::sleep_for(std::chrono::milliseconds(100));
                exchangeControl();
            }
            progress.pausedS += secondsSince(pauseStart);
            setState(protocol::WorkerState::Running);
            continue;
        }
        if (control.at(0, ControlExchange::Eval) > 0) {
            protocol::EvalRecord e = evaluateGroup(comm, trainer, progress, false);
            progress.lastEvalT = progress.elapsed();
            // Every worker sees the same global accuracy: stop together,
            // before another step moves the model away from it.
            e.final = m_spec.budget.targetAccuracy > 0 && e.globalAccuracy >= m_spec.budget.targetAccuracy;
            if (m_hooks.eval)
                m_hooks.eval(e);
            if (e.final) {
                result.finalEval = e;
                return GroupEnd::Finished;
            }
        }

        RoundContext ctx;
        ctx.mergeRequested = control.any(ControlExchange::Merge);
        ctx.emitMerge = mergeHook(members);
        for (int w = 0; w < world; ++w)
            ctx.rates.push_back(control.at(w, ControlExchange::Rate));
        ctx.bandwidth = control.bandwidth();
        runRound(*strategy, trainer, emulator, progress, pacer, ctx, members);
    }
    return finish(comm, trainer, progress);
}

std::function<void(const protocol::MergeEvent &)> Worker::mergeHook(const QList<int> &members) const
{
    return [this, members](const protocol::MergeEvent &m) {
        if (!m_hooks.merge)
            return;
        protocol::MergeEvent byId = m;
        byId.from = members.value(m.from, m.from);
        byId.to = members.value(m.to, m.to);
        m_hooks.merge(byId);
    };
}

Worker::GroupEnd Worker::finish(Comm &comm, Trainer &trainer, Progress &progress)
{
    if (!progress.result.finalEval.final) {
        progress.result.finalEval = evaluateGroup(comm, trainer, progress, true);
        if (m_hooks.eval)
            m_hooks.eval(progress.result.finalEval);
    }
    return GroupEnd::Finished;
}

namespace {

// A message-passing group's control row, sent to every peer at least every
// kControlPeriodS: what all-reduce's ControlExchange agrees on each round.
// AStop ends the group's training for all (a stop request, the target,
// the epoch budget); ADone says this worker has spent its own time or
// rounds budget and waits for the others to spend theirs: every worker
// gets the same training time, whatever its peers' evaluations cost.
enum AsyncSlot { ARate, ASamples, AStop, ADone, ARegroup, ASlotCount };
constexpr double kControlPeriodS = 0.25;

// Rank 0's view of the replicas' evaluations: each worker scores its
// replica when its own clock passes a multiple of the interval and sends
// (index, accuracy, loss); an index is reported once every replica has
// reached it.
class EvalCollector {
public:
    explicit EvalCollector(int world) : m_byRank(std::size_t(world)) {}

    void add(int rank, std::int64_t index, double accuracy, double loss, double t)
    {
        auto &q = m_byRank[std::size_t(rank)];
        q.push_back({index, accuracy, loss, t});
        if (q.size() > 64)
            q.pop_front();
    }
    // Mean, min and max over the replicas' first evaluations at or after
    // the newest index that all have reached, once per index; its time is
    // the latest of theirs, so time to accuracy is never early.
    bool next(protocol::EvalRecord &e)
    {
        std::int64_t reached = std::numeric_limits<std::int64_t>::max();
        for (const auto &q : m_byRank)
            reached = std::min(reached, q.empty() ? -1 : q.back().index);
        if (reached <= m_reported)
            return false;
        m_reported = reached;
        double sumAcc = 0, sumLoss = 0;
        e.minAccuracy = 1;
        e.maxAccuracy = 0;
        e.t = 0;
        for (const auto &q : m_byRank) {
            const auto it = std::find_if(q.begin(), q.end(), [&](const Entry &x) { return x.index >= reached; });
            sumAcc += it->accuracy;
            sumLoss += it->loss;
            e.minAccuracy = std::min(e.minAccuracy, it->accuracy);
            e.maxAccuracy = std::max(e.maxAccuracy, it->accuracy);
            e.t = std::max(e.t, it->t);
        }
        e.globalAccuracy = sumAcc / double(m_byRank.size());
        e.globalLoss = sumLoss / double(m_byRank.size());
        return true;
    }

private:
    struct Entry {
        std::int64_t index;
        double accuracy, loss, t;
    };
    std::vector<std::deque<Entry>> m_byRank;
    std::int64_t m_reported = -1;
};

} // namespace

Worker::GroupEnd Worker::trainByMessages(Comm &comm, Trainer &trainer, LinkEmulator &emulator, Progress &progress)
{
    const int rank = comm.rank();
    const int world = comm.world();
    const QList<int> members = m_plan.members;
    Mailbox mailbox(comm, emulator);
    auto strategy = makeStrategy(m_spec, trainer, comm, emulator, &mailbox);
    ComputePacer pacer(m_spec.threads);
    WorkerResult &result = progress.result;
    const double interval = m_spec.evalIntervalS;

    std::vector<std::vector<double>> rows(std::size_t(world), std::vector<double>(ASlotCount + world, 0.0));
    bool targetReached = false, budgetSpent = false;
    auto lastControl = Clock::now();
    auto myRow = [&] {
        std::vector<double> row(ASlotCount, 0.0);
        row[ARate] = progress.meter.rate();
        row[ASamples] = double(result.samples);
        double groupSamples = 0;
        for (int r = 0; r < world; ++r)
            groupSamples += r == rank ? row[ASamples] : rows[std::size_t(r)][ASamples];
        row[AStop] = m_stop || targetReached || epochsSpent(groupSamples, trainer) ? 1 : 0;
        // Once said, never unsaid: peers may already be leaving on it, and
        // the clock steps back when a wait on an evaluating peer is taken off it.
        budgetSpent = budgetSpent || ownBudgetSpent(progress);
        row[ADone] = budgetSpent ? 1 : 0;
        row[ARegroup] = m_regroupPending ? 1 : 0;
        const std::vector<double> incoming = strategy->incomingBandwidth();
        row.insert(row.end(), incoming.begin(), incoming.end());
        row.resize(std::size_t(ASlotCount + world), 0.0);
        return row;
    };
    auto sendControl = [&] {
        rows[std::size_t(rank)] = myRow();
        const torch::Tensor words = Mailbox::packDoubles(rows[std::size_t(rank)]);
        mailbox.sendToPeers(Mailbox::Kind::Control, result.rounds, words, progress.elapsed());
        lastControl = Clock::now();
    };
    EvalCollector evals(world);
    double ownAccuracy = 0, ownLoss = 0;  // rank 0's replica at its last evaluation
    auto absorb = [&] {
        for (const auto &m : mailbox.take(Mailbox::Kind::Control)) {
            auto row = Mailbox::unpackDoubles(m.payload);
            row.resize(std::size_t(ASlotCount + world), 0.0);
            rows[std::size_t(m.from)] = std::move(row);
        }
        for (const auto &m : mailbox.take(Mailbox::Kind::Eval)) {
            const auto v = Mailbox::unpackDoubles(m.payload);
            if (v.size() == 3)
                evals.add(m.from, m.round, v[0], v[1], v[2]);
        }
    };
    auto anyPeer = [&](AsyncSlot slot) {
        return std::any_of(rows.begin(), rows.end(), [&](const std::vector<double> &r) { return r[slot] > 0; });
    };
    auto allDone = [&] {
        return std::all_of(rows.begin(), rows.end(), [&](const std::vector<double> &r) { return r[ADone] > 0; });
    };
    auto leaving = [&] {
        rows[std::size_t(rank)] = myRow();
        return anyPeer(AStop) || anyPeer(ARegroup) || allDone() || mailbox.anyPeerClosed();
    };
    // While a strategy waits for peers: keep the control rows flowing (they
    // are also the receivers' sign of life) and give up when leaving.
    auto keepWaiting = [&] {
        absorb();
        if (secondsSince(lastControl) >= kControlPeriodS)
            sendControl();
        return !leaving();
    };
    // An evaluation is due when this worker's clock passes the next multiple
    // of the interval, or when a peer has started one this worker has not
    // made: evaluating with it overlaps the two, where one after the other
    // would stop every clock twice.
    auto evaluationDue = [&] {
        const auto last = std::int64_t(std::floor(progress.lastEvalT / interval + 1e-9));
        return progress.elapsed() - progress.lastEvalT >= interval || mailbox.evaluationAnnounced() > last;
    };
    auto evaluateReplica = [&] {
        const auto started = Clock::now();
        const double t = progress.elapsed();
        const std::int64_t index = std::max(std::int64_t(t / interval), mailbox.evaluationAnnounced());
        mailbox.evaluating(true, index, t);
        const EvalResult local = trainer.evaluate();
        mailbox.evaluating(false, index, t);
        progress.lastEvalT = double(index) * interval;
        protocol::EvalRecord e = evalRecord(m_spec.rank, result.rounds, t, local);
        e.samples = int(local.count);
        if (rank == 0) {
            evals.add(0, index, local.accuracy(), local.loss(), t);
            ownAccuracy = local.accuracy();
            ownLoss = local.loss();
        } else {
            mailbox.send(0, Mailbox::Kind::Eval, index, Mailbox::packDoubles({local.accuracy(), local.loss(), t}),
                         progress.elapsed());
            e.globalAccuracy = e.minAccuracy = e.maxAccuracy = e.accuracy;
            e.globalLoss = e.loss;
            if (m_hooks.eval)
                m_hooks.eval(e);
        }
        progress.pausedS += secondsSince(started);
    };
    // Rank 0 reports the group's figures for each evaluation index.
    auto reportEvals = [&] {
        protocol::EvalRecord e = evalRecord(m_spec.rank, result.rounds, 0, EvalResult{});
        if (rank != 0 || !evals.next(e))
            return;
        e.accuracy = ownAccuracy;
        e.loss = ownLoss;
        e.primary = true;
        targetReached = m_spec.budget.targetAccuracy > 0 && e.globalAccuracy >= m_spec.budget.targetAccuracy;
        if (m_hooks.eval)
            m_hooks.eval(e);
    };

    setState(protocol::WorkerState::Running);
    sendControl();
    // Bounded by the budget, which the job spec guarantees is set: every
    // worker leaves when its own budget is spent or a peer's row says stop.
    while (!leaving()) {
        mailbox.check();
        const bool done = rows[std::size_t(rank)][ADone] > 0;
        if (m_pause || done) {
            setState(done ? protocol::WorkerState::Waiting : protocol::WorkerState::Paused);
            const auto pauseStart = Clock::now();
            while ((m_pause || done) && !leaving()) {
                std::this_thread::sleep_for(std::chrono::milliseconds(100));
                keepWaiting();
                mailbox.check();
            }
            // A worker whose budget is spent stops its clock too.
            progress.pausedS += secondsSince(pauseStart);
            if (!done)
                setState(protocol::WorkerState::Running);
            continue;
        }
        if (evaluationDue())
            evaluateReplica();

        RoundContext ctx;
        ctx.keepWaiting = keepWaiting;
        ctx.mergeRequested = m_merge.exchange(false);
        ctx.emitMerge = mergeHook(members);
        for (int w = 0; w < world; ++w)
            ctx.rates.push_back(rows[std::size_t(w)][ARate]);
        ctx.rates[std::size_t(rank)] = progress.meter.rate();
        ctx.bandwidth.assign(std::size_t(world * world), 0.0);
        for (int j = 0; j < world; ++j) {
            for (int i = 0; i < world; ++i)
                ctx.bandwidth[std::size_t(i * world + j)] = rows[std::size_t(j)][std::size_t(ASlotCount + i)];
        }
        const auto mine = ctx.bandwidth.begin() + rank * world;
        const std::vector<double> outgoing = mailbox.outgoingEstimate(std::vector<double>(mine, mine + world));
        std::copy(outgoing.begin(), outgoing.end(), mine);
        runRound(*strategy, trainer, emulator, progress, pacer, ctx, members, &mailbox);
        absorb();
        reportEvals();
        if (secondsSince(lastControl) >= kControlPeriodS)
            sendControl();
    }

    // The last row says why this worker leaves; after the Bye handshake
    // every worker holds every peer's last row, so all take the same
    // decision: finish if any says stop, else re-form the group.
    sendControl();
    mailbox.close();
    absorb();
    reportEvals();
    rows[std::size_t(rank)] = myRow();
    const bool finished = anyPeer(AStop) || allDone();
    if (!finished && anyPeer(ARegroup))
        return GroupEnd::Regroup;
    if (!finished)
        throw GroupBrokenError("a peer left the group without saying why");
    return finish(comm, trainer, progress);
}

} // namespace dlion::engine
