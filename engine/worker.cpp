#include "worker.h"

#include "checkpoint.h"
#include "comm.h"
#include "compute_pacer.h"
#include "control_exchange.h"
#include "engine_error.h"
#include "link_emulator.h"
#include "mailbox.h"
#include "strategy.h"
#include "strategy_options.h"
#include "trainer.h"
#include "worker_progress.h"

#include <QCryptographicHash>
#include <QLoggingCategory>

#include <torch/utils.h>

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>
#include <thread>

Q_LOGGING_CATEGORY(lcEngine, "dlion.engine")

namespace dlion::engine {

namespace {

// LibTorch parallelises with its own `threads`; an OpenBLAS behind
// libblas.so.3 would start as many threads again inside each product, on
// cores the workers share. Its serial build has no locks, so LibTorch's
// threads calling it at once can get wrong products: say so.
void limitBlasThreads(int torchThreads)
{
    if (auto set = reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads")))
        set(1);
    const auto parallel = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "openblas_get_parallel"));
    if (parallel && parallel() == 0 && torchThreads > 1)
        qCWarning(lcEngine) << "LibTorch runs" << torchThreads << "threads on the serial OpenBLAS, which is not safe "
                            << "for threads that call it at once; install libopenblas0-pthread or set threads to 1";
}

// The replica as the run's final model. After the final evaluation every
// replica holds the average model the evaluation scored (consensus
// accuracy); a run that stopped at its target under all-reduce holds
// identical replicas, scored as this one's own accuracy.
FinalModel finalModel(Trainer &trainer, const protocol::EvalRecord &e)
{
    auto bytes = [](const std::string &s) { return QByteArray(s.data(), qsizetype(s.size())); };
    auto sha256 = [](const QByteArray &b) {
        return b.isEmpty() ? QByteArray() : QCryptographicHash::hash(b, QCryptographicHash::Sha256).toHex();
    };
    FinalModel m;
    m.stateDict = bytes(trainer.model().stateDict());
    m.stateDictSha256 = sha256(m.stateDict);
    m.bytes = bytes(trainer.model().torchScript());
    m.sha256 = sha256(m.bytes);
    m.parameters = trainer.parameterCount();
    m.inputShape = trainer.inputShape();
    m.accuracy = e.final && e.consensusAccuracy > 0 ? e.consensusAccuracy : e.accuracy;
    return m;
}

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

} // namespace

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
    const auto buffers = std::size_t(trainer.bufferCount());
    if (c.model != m_spec.model || c.params.size() != n || c.buffers.size() != buffers)
        throw EngineError(QStringLiteral("checkpoint %1 holds model \"%2\" with %3 parameters and %4 buffer values; this "
                                         "job trains \"%5\" with %6 and %7")
                              .arg(path, c.model).arg(c.params.size()).arg(c.buffers.size()).arg(m_spec.model).arg(n)
                              .arg(buffers).toStdString());
    std::memcpy(trainer.flatParams().data_ptr<float>(), c.params.data(), n * sizeof(float));
    std::memcpy(trainer.flatMomentum().data_ptr<float>(), c.momentum.data(), n * sizeof(float));
    std::memcpy(trainer.flatBuffers().data_ptr<float>(), c.buffers.data(), buffers * sizeof(float));
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
    const float *b = trainer.flatBuffers().data_ptr<float>();
    c.params.assign(p, p + trainer.parameterCount());
    c.momentum.assign(m, m + trainer.parameterCount());
    c.buffers.assign(b, b + trainer.bufferCount());
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

void Worker::checkModelSizes(Comm &comm, const protocol::GroupPlan &plan, Trainer &trainer)
{
    // Each worker builds its model from its own data's shape and classes:
    // with per-worker data they may differ, which no broadcast survives.
    // Every member learns of a mismatch, so none waits out a timeout.
    auto size = torch::tensor({double(trainer.parameterCount())}, torch::kDouble);
    comm.broadcast(size, plan.rankOf(plan.source));
    const auto sourceSize = std::int64_t(size.item<double>());
    auto mismatches = torch::tensor({sourceSize != trainer.parameterCount() ? 1.0 : 0.0}, torch::kDouble);
    comm.allreduceSum(mismatches, Comm::Pace::Free);
    if (mismatches.item<double>() > 0)
        throw EngineError("worker " + std::to_string(m_spec.rank) + "'s model has " + std::to_string(trainer.parameterCount())
                          + " parameters, worker " + std::to_string(plan.source) + "'s " + std::to_string(sourceSize)
                          + ", and " + std::to_string(int(mismatches.item<double>()))
                          + " workers differ: every worker's data must have samples of one shape and the same classes "
                            "(set class_names in the job)");
}

void Worker::joinGroup(Comm &comm, const protocol::GroupPlan &plan, Trainer &trainer, LinkEmulator &emulator,
                       Progress &progress)
{
    setState(protocol::WorkerState::Rendezvous);
    const auto formingStart = Clock::now();
    comm.connect();
    emulator.setGroup(std::vector<int>(plan.members.begin(), plan.members.end()));
    // Every member starts from the source's replica (parameters and
    // buffers) and progress: identical replicas at the start, the best
    // one's after a regroup.
    const int source = plan.rankOf(plan.source);
    checkModelSizes(comm, plan, trainer);
    comm.broadcast(trainer.flatState(), source);
    comm.broadcast(trainer.flatMomentum(), source);
    // Forming the group is setup, as a PyTorch job's init_process_group
    // and DDP's first broadcast are: off the clock, which the source's
    // figure below would otherwise carry into every member's.
    progress.pausedS += secondsSince(formingStart);
    auto shared = torch::tensor({double(progress.result.rounds), progress.elapsed(), progress.lastEvalT}, torch::kDouble);
    comm.broadcast(shared, source);
    progress.result.rounds = qint64(shared[0].item<double>());
    trainer.setRound(progress.result.rounds);
    progress.adopt(shared[1].item<double>());
    progress.lastEvalT = shared[2].item<double>();
    // From here on every collective pays its emulated links; forming the
    // group (above) is not charged.
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
    limitBlasThreads(m_spec.threads);
    if (m_spec.device != QLatin1String("cpu"))
        throw EngineError("device \"" + m_spec.device.toStdString() + "\" is not available: this build of the engine "
                          "uses a CPU-only LibTorch");

    LinkEmulator emulator(m_spec.emulation, m_spec.world);
    setState(protocol::WorkerState::Loading);
    // All-reduce's gradient carries the control slots of the largest group.
    Trainer trainer(m_spec, exchangesMessages(m_spec.strategy) ? 0 : ControlExchange::blockSize(m_spec.world));
    qCInfo(lcEngine) << "worker" << m_spec.rank << "holds" << trainer.localTrainSize() << "training samples,"
                     << trainer.parameterCount() << "parameters";
    if (m_hooks.data)
        m_hooks.data(trainer.dataSummary());

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
    if (progress.result.finalEval.primary)
        progress.result.model = finalModel(trainer, progress.result.finalEval);
    progress.result.stoppedByRequest = m_stop;
    progress.result.seconds = progress.elapsed();
    qCInfo(lcEngine) << "worker" << m_spec.rank << "finished after" << progress.result.rounds << "rounds, accuracy"
                     << progress.result.finalEval.globalAccuracy;
    return progress.result;
}

protocol::EvalRecord Worker::evaluateGroup(Comm &comm, Trainer &trainer, Progress &progress, bool final)
{
    // Every replica on the same test subset; at the end also the averaged
    // model (parameters and buffers), which every replica then adopts as
    // the run's final model, each rank scoring a 1/n shard of the subset
    // with it (only then: on real links the model crossing every link at
    // each evaluation would take the training's bandwidth). This is the
    // experimenter's measurement, not training: its time is taken off the
    // training clock and its collectives are not paced, for every strategy
    // alike. All-reduce's replicas share their parameters already; they
    // average their buffers at each evaluation, so every replica scores,
    // and keeps, the same BatchNorm statistics.
    const int rank = comm.rank(), world = comm.world();
    const double t = progress.elapsed();
    const auto started = Clock::now();
    auto average = [&](torch::Tensor &flat) {
        comm.allreduceSum(flat, Comm::Pace::Free);
        flat.div_(world);
    };
    if (!final && trainer.bufferCount() > 0)
        average(trainer.flatBuffers());
    const EvalResult local = trainer.evaluate();
    EvalResult shard;
    if (final) {
        average(trainer.flatState());
        shard = trainer.evaluateShard(rank, world);
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

bool Worker::ownBudgetSpent(const Progress &progress, int roundsAhead) const
{
    const auto &budget = m_spec.budget;
    return (budget.seconds > 0 && progress.elapsed() >= budget.seconds)
        || (budget.maxRounds > 0 && progress.result.rounds + roundsAhead >= budget.maxRounds);
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
    if (factor > 1 && !pacer.calibrated()) {
        // What a step costs warm, measured once, off the clock: a slowed
        // step counts for no more (compute_pacer.h).
        const auto started = Clock::now();
        pacer.calibrate(m_spec.batchSize, [&trainer](std::int64_t samples) { trainer.trialStep(samples); });
        progress.pausedS += secondsSince(started);
    }
    pacer.begin(batch);
    ctx.paceCompute = [&pacer, factor] { pacer.catchUp(factor); };
    strategy.beginCompute(ctx);
    rec.loss = trainer.computeGradient(batch);
    const double computeS = pacer.end(factor);
    progress.meter.add(double(batch), computeS);
    if (ctx.packControl)
        ctx.packControl(batch);

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

    // This worker's control slots; `inFlight` is the batch of the round
    // whose gradient all-reduce carries them (0: they travel alone, between
    // rounds), counted as done.
    auto controlSlots = [&](std::int64_t inFlight, double (&mine)[ControlExchange::SlotCount]) {
        mine[ControlExchange::Rate] = progress.meter.rate();
        mine[ControlExchange::Samples] = double(result.samples + inFlight);
        mine[ControlExchange::Stop] = m_stop ? 1 : 0;
        mine[ControlExchange::Pause] = m_pause ? 1 : 0;
        mine[ControlExchange::Merge] = m_merge.exchange(false) ? 1 : 0;
        mine[ControlExchange::Regroup] = m_regroupPending ? 1 : 0;
        if (rank == 0) {
            if (ownBudgetSpent(progress, inFlight > 0 ? 1 : 0)
                || epochsSpent(control.sum(ControlExchange::Samples), trainer))
                mine[ControlExchange::Stop] = 1;
            mine[ControlExchange::Eval] = progress.elapsed() - progress.lastEvalT >= m_spec.evalIntervalS ? 1 : 0;
        }
    };
    auto exchangeControl = [&] {
        double mine[ControlExchange::SlotCount] = {};
        controlSlots(0, mine);
        control.exchange(mine, strategy->incomingBandwidth());
    };
    const std::int64_t controlSize = ControlExchange::blockSize(world);
    const torch::Tensor gradWithControl = trainer.gradWithHead(controlSize);
    const torch::Tensor controlBlock = gradWithControl.narrow(0, 0, controlSize);

    setState(protocol::WorkerState::Running);
    // A group's first round, and one after a pause, exchange the control
    // slots alone; every other round's came with the last round's gradient.
    bool controlCarried = false;
    // Bounded by the budget, which the job spec guarantees is set.
    for (;;) {
        if (!controlCarried)
            exchangeControl();
        controlCarried = false;
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
        ctx.gradWithControl = gradWithControl;
        ctx.packControl = [&](std::int64_t batch) {
            double mine[ControlExchange::SlotCount] = {};
            controlSlots(batch, mine);
            control.pack(mine, strategy->incomingBandwidth(), controlBlock);
        };
        runRound(*strategy, trainer, emulator, progress, pacer, ctx, members);
        control.unpack(controlBlock);
        controlCarried = true;
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

} // namespace dlion::engine
