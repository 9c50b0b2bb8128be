// The training loop of every strategy that talks through a Mailbox (all
// but all-reduce): control rows travel as messages beside the strategy's
// own, and no call waits on a collective until the final evaluation.

#include "comm.h"
#include "compute_pacer.h"
#include "engine_error.h"
#include "mailbox.h"
#include "peer_control.h"
#include "strategy.h"
#include "worker_progress.h"

#include <algorithm>
#include <cmath>
#include <thread>

namespace dlion::engine {

namespace {
// How often each peer hears this worker's control row at least: the rows
// are also the receivers' sign of life. They ride on Data messages where
// there are any (Mailbox::postRow()).
constexpr double kControlPeriodS = 0.25;
} // namespace

class Worker::MessageLoop {
public:
    MessageLoop(Worker &worker, Comm &comm, Trainer &trainer, LinkEmulator &emulator, Progress &progress)
        : m_worker(worker), m_trainer(trainer), m_emulator(emulator), m_progress(progress), m_rank(comm.rank()),
          m_world(comm.world()), m_members(worker.m_plan.members), m_mailbox(comm, emulator, Mailbox::eagerWordsFor(trainer.parameterCount() + trainer.bufferCount())),
          m_strategy(makeStrategy(worker.m_spec, trainer, comm, emulator, &m_mailbox)),
          m_pacer(worker.m_spec.threads), m_rows(m_world, m_rank), m_evals(m_world),
          m_interval(worker.m_spec.evalIntervalS)
    {}

    GroupEnd run();

private:
    std::vector<double> ownRow();
    // Posts this worker's row; periodS as Mailbox::postRow().
    void postControl(double periodS);
    void absorb();
    bool leaving();
    // While a strategy waits for peers: keep the control rows flowing and
    // give up when leaving.
    bool keepWaiting();
    // Paused, or this worker's budget spent: wait, clock stopped, until
    // that ends or the group is left.
    void idle(bool done);
    bool evaluationDue() const;
    void evaluateReplica();
    // Rank 0 reports the group's figures for each evaluation index.
    void reportEvals();
    RoundContext roundContext();

    Worker &m_worker;
    Trainer &m_trainer;
    LinkEmulator &m_emulator;
    Progress &m_progress;
    const int m_rank, m_world;
    const QList<int> m_members;
    Mailbox m_mailbox;
    std::unique_ptr<Strategy> m_strategy;
    ComputePacer m_pacer;
    ControlRows m_rows;
    EvalCollector m_evals;
    const double m_interval;
    bool m_targetReached = false;
    bool m_budgetSpent = false;
    double m_ownAccuracy = 0, m_ownLoss = 0;  // rank 0's replica at its last evaluation
};

std::vector<double> Worker::MessageLoop::ownRow()
{
    const WorkerResult &result = m_progress.result;
    std::vector<double> row(ControlRows::SlotCount, 0.0);
    row[ControlRows::Rate] = m_progress.meter.rate();
    row[ControlRows::Samples] = double(result.samples);
    const double groupSamples = m_rows.sumWithOwn(ControlRows::Samples, row[ControlRows::Samples]);
    row[ControlRows::Stop] = m_worker.m_stop || m_targetReached || m_worker.epochsSpent(groupSamples, m_trainer) ? 1 : 0;
    // Once said, never unsaid: peers may already be leaving on it, and the
    // clock steps back when a wait on an evaluating peer is taken off it.
    m_budgetSpent = m_budgetSpent || m_worker.ownBudgetSpent(m_progress);
    row[ControlRows::Done] = m_budgetSpent ? 1 : 0;
    row[ControlRows::Regroup] = m_worker.m_regroupPending ? 1 : 0;
    const std::vector<double> incoming = m_strategy->incomingBandwidth();
    row.insert(row.end(), incoming.begin(), incoming.end());
    return row;
}

void Worker::MessageLoop::postControl(double periodS)
{
    m_rows.set(m_rank, ownRow());
    m_mailbox.postRow(Mailbox::packDoubles(m_rows.row(m_rank)), m_progress.result.rounds, m_progress.elapsed(), periodS);
}

void Worker::MessageLoop::absorb()
{
    for (const auto &m : m_mailbox.take(Mailbox::Kind::Control))
        m_rows.set(m.from, Mailbox::unpackDoubles(m.payload));
    for (const auto &m : m_mailbox.take(Mailbox::Kind::Eval)) {
        const auto v = Mailbox::unpackDoubles(m.payload);
        if (v.size() == 3)
            m_evals.add(m.from, m.round, v[0], v[1], v[2]);
    }
}

bool Worker::MessageLoop::leaving()
{
    m_rows.set(m_rank, ownRow());
    return m_rows.any(ControlRows::Stop) || m_rows.any(ControlRows::Regroup) || m_rows.all(ControlRows::Done)
        || m_mailbox.anyPeerClosed();
}

bool Worker::MessageLoop::keepWaiting()
{
    absorb();
    postControl(kControlPeriodS);
    return !leaving();
}

void Worker::MessageLoop::idle(bool done)
{
    m_worker.setState(done ? protocol::WorkerState::Waiting : protocol::WorkerState::Paused);
    const auto started = Clock::now();
    while ((m_worker.m_pause || done) && !leaving()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        keepWaiting();
        m_mailbox.check();
    }
    // A worker whose budget is spent stops its clock too.
    m_progress.pausedS += secondsSince(started);
    if (!done)
        m_worker.setState(protocol::WorkerState::Running);
}

// An evaluation is due when this worker's clock passes the next multiple of
// the interval, or when a peer has started one this worker has not made:
// evaluating with it overlaps the two, where one after the other would stop
// every clock twice.
bool Worker::MessageLoop::evaluationDue() const
{
    const auto last = std::int64_t(std::floor(m_progress.lastEvalT / m_interval + 1e-9));
    return m_progress.elapsed() - m_progress.lastEvalT >= m_interval || m_mailbox.evaluationAnnounced() > last;
}

void Worker::MessageLoop::evaluateReplica()
{
    const auto started = Clock::now();
    const double t = m_progress.elapsed();
    const std::int64_t index = std::max(std::int64_t(t / m_interval), m_mailbox.evaluationAnnounced());
    m_mailbox.evaluating(true, index, t);
    const EvalResult local = m_trainer.evaluate();
    m_mailbox.evaluating(false, index, t);
    m_progress.lastEvalT = double(index) * m_interval;
    protocol::EvalRecord e = evalRecord(m_worker.m_spec.rank, m_progress.result.rounds, t, local);
    e.samples = int(local.count);
    if (m_rank == 0) {
        m_evals.add(0, index, local.accuracy(), local.loss(), t);
        m_ownAccuracy = local.accuracy();
        m_ownLoss = local.loss();
    } else {
        m_mailbox.send(0, Mailbox::Kind::Eval, index, Mailbox::packDoubles({local.accuracy(), local.loss(), t}),
                       m_progress.elapsed());
        e.globalAccuracy = e.minAccuracy = e.maxAccuracy = e.accuracy;
        e.globalLoss = e.loss;
        if (m_worker.m_hooks.eval)
            m_worker.m_hooks.eval(e);
    }
    m_progress.pausedS += secondsSince(started);
}

void Worker::MessageLoop::reportEvals()
{
    protocol::EvalRecord e = evalRecord(m_worker.m_spec.rank, m_progress.result.rounds, 0, EvalResult{});
    if (m_rank != 0 || !m_evals.next(e))
        return;
    e.accuracy = m_ownAccuracy;
    e.loss = m_ownLoss;
    e.primary = true;
    const double target = m_worker.m_spec.budget.targetAccuracy;
    m_targetReached = target > 0 && e.globalAccuracy >= target;
    if (m_worker.m_hooks.eval)
        m_worker.m_hooks.eval(e);
}

RoundContext Worker::MessageLoop::roundContext()
{
    RoundContext ctx;
    ctx.keepWaiting = [this] { return keepWaiting(); };
    ctx.mergeRequested = m_worker.m_merge.exchange(false);
    ctx.emitMerge = m_worker.mergeHook(m_members);
    for (int w = 0; w < m_world; ++w)
        ctx.rates.push_back(m_rows.at(w, ControlRows::Rate));
    ctx.rates[std::size_t(m_rank)] = m_progress.meter.rate();
    ctx.bandwidth = m_rows.bandwidth();
    // This worker's outgoing links: what its peers measured, or its own
    // bound where a payload outran its deadline.
    const auto mine = ctx.bandwidth.begin() + m_rank * m_world;
    const std::vector<double> outgoing = m_mailbox.outgoingEstimate(std::vector<double>(mine, mine + m_world));
    std::copy(outgoing.begin(), outgoing.end(), mine);
    return ctx;
}

Worker::GroupEnd Worker::MessageLoop::run()
{
    m_worker.setState(protocol::WorkerState::Running);
    postControl(0);
    // Bounded by the budget, which the job spec guarantees is set: every
    // worker leaves when its own budget is spent or a peer's row says stop.
    while (!leaving()) {
        m_mailbox.check();
        const bool done = m_rows.at(m_rank, ControlRows::Done) > 0;
        if (m_worker.m_pause || done) {
            idle(done);
            continue;
        }
        if (evaluationDue())
            evaluateReplica();
        RoundContext ctx = roundContext();
        m_worker.runRound(*m_strategy, m_trainer, m_emulator, m_progress, m_pacer, ctx, m_members, &m_mailbox);
        absorb();
        reportEvals();
        postControl(kControlPeriodS);
    }

    // The last row says why this worker leaves; after the Bye handshake
    // every worker holds every peer's last row, so all take the same
    // decision: finish if any says stop, else re-form the group.
    postControl(0);
    m_mailbox.close();
    absorb();
    reportEvals();
    m_rows.set(m_rank, ownRow());
    const bool finished = m_rows.any(ControlRows::Stop) || m_rows.all(ControlRows::Done);
    if (!finished && m_rows.any(ControlRows::Regroup))
        return GroupEnd::Regroup;
    if (!finished)
        throw GroupBrokenError("a peer left the group without saying why");
    return GroupEnd::Finished;
}

Worker::GroupEnd Worker::trainByMessages(Comm &comm, Trainer &trainer, LinkEmulator &emulator, Progress &progress)
{
    MessageLoop loop(*this, comm, trainer, emulator, progress);
    if (loop.run() == GroupEnd::Regroup)
        return GroupEnd::Regroup;
    return finish(comm, trainer, progress);
}

} // namespace dlion::engine
