#include "dlion_strategy.h"

#include "batch_shares.h"
#include "mailbox.h"
#include "strategy_options.h"
#include "trainer.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

namespace dlion::engine {

namespace {
// The longest one payload may occupy its link (unless the round's own time
// budget is longer): far under the point-to-point timeout, so a link cut to
// a trickle stalls a round by about this, and never breaks the group. A
// probe (16 KiB) still fits down to about 0.07 Mbit/s.
constexpr double kMaxSendS = 2.0;
// A link too slow to carry even a probe within that bound is all but cut:
// it earns credit at this fraction of its rate, so it sends a small probe
// now and then (enough to notice that it recovered) and stalls the group
// for a tenth of the time at most.
constexpr double kCutLinkShare = 0.1;
// Rounds whose time the budget follows: enough that a stall's round does
// not move the median.
constexpr std::size_t kBudgetWindow = 15;
// Growth factors a payload's header word has room for (max_growth < this).
constexpr std::int64_t kGrowthSlots = 64;

// A round pipelines (runs one round stale) while its wait beyond compute
// stays under this share of its compute, and starts to once it falls under
// the next: the wait a pipelined round still shows is what its compute did
// not hide, so the two thresholds keep a group from switching back and
// forth on the same links. Only rounds whose payloads all went dense
// pipeline: a payload sized to the round's compute makes the wait about
// that compute, and whether a group pipelined was a toss-up from run to
// run (docs/benchmarks.md). A pipelined group stays while most of the
// window's rounds went dense: on a busy host a stall now and then reads a
// fast link as slow and sends one round sparse (4-9% of the straggler
// pair's fast worker's rounds), which ended the pipelining for a window
// or more; staying raised the pair's throughput by 5-28% in three runs
// against three.
constexpr double kPipelineBelow = 1.0;
constexpr double kStayPipelinedBelow = 0.5;

// The payload header's word: the sender's batch share, the growth it was
// computed at, its proposals (growth, pipelining), and a merge request.
struct HeaderWord {
    std::int64_t share = 0, growth = 1;
    DlionStrategy::Proposal proposal;
    bool merge = false;
    std::int64_t encode() const
    {
        return (((share * kGrowthSlots + growth) * kGrowthSlots + proposal.growth) * 2 + (proposal.pipeline ? 1 : 0)) * 2
            + (merge ? 1 : 0);
    }
    static HeaderWord decode(std::int64_t aux)
    {
        const std::int64_t rest = aux / 4;
        return {rest / kGrowthSlots / kGrowthSlots, rest / kGrowthSlots % kGrowthSlots,
                {rest % kGrowthSlots, (aux & 2) != 0}, (aux & 1) != 0};
    }
};

double medianOf(const std::deque<double> &window)
{
    std::vector<double> v(window.begin(), window.end());
    std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(v.size() / 2), v.end());
    return v[v.size() / 2];
}

template <typename T>
void keepRecent(std::deque<T> &window, T value)
{
    window.push_back(value);
    if (window.size() > kBudgetWindow)
        window.pop_front();
}
} // namespace

DlionStrategy::DlionStrategy(const protocol::JobSpec &spec, Trainer &trainer, Mailbox &mailbox)
    : m_trainer(trainer), m_mailbox(mailbox), m_batch(spec.batchSize), m_transfer(1, 500),
      m_topk(mailbox.world(), trainer.parameterCount())
{
    const StrategyOptions o(spec.strategyOptions, spec.strategy);
    m_staleness = std::int64_t(o.number("staleness"));
    m_pipeline = o.flag("pipeline") && m_staleness == 0;
    m_wdb = o.flag("wdb");
    m_prioritized = o.flag("prioritized");
    m_dkt = o.flag("dkt");
    m_minShare = std::int64_t(o.number("min_share", std::max(1, spec.batchSize / 8)));
    m_maxShare = std::int64_t(o.number("max_share", std::max(4.0 * spec.batchSize, double(m_minShare))));
    if (m_maxShare < m_minShare)
        throw EngineError("field \"strategy_options.max_share\" must be at least min_share (" + std::to_string(m_minShare) + ")");
    m_roundBudgetS = o.number("round_budget_s");
    m_maxGrowth = std::int64_t(o.number("max_growth"));
    if (m_maxGrowth < 1 || m_maxGrowth >= kGrowthSlots)
        throw EngineError("field \"strategy_options.max_growth\" must be from 1 to " + std::to_string(kGrowthSlots - 1));
    m_transfer = KnowledgeTransfer(o.number("dkt_alpha"), std::int64_t(o.number("heldout_samples")),
                                   std::int64_t(o.number("dkt_period")), o.number("dkt_share"), o.number("dkt_margin"));
    m_shares.assign(std::size_t(mailbox.world()), m_batch);
    m_credit.assign(std::size_t(mailbox.world()), 0.0);
}

std::vector<double> DlionStrategy::incomingBandwidth() const { return m_mailbox.incomingBandwidth(); }

std::int64_t DlionStrategy::localBatch(const RoundContext &ctx)
{
    const int n = m_mailbox.world();
    m_roundGrowth = m_growth;
    if (m_wdb)
        m_shares = computeShares(ctx.rates, m_batch * m_growth * n, m_minShare * m_growth, m_maxShare * m_growth);
    else
        m_shares.assign(std::size_t(n), m_batch * m_growth);
    return m_shares[std::size_t(m_mailbox.rank())];
}

double DlionStrategy::measuredBps(int peer, const RoundContext &ctx) const
{
    return ctx.bandwidth.empty() ? 0 : ctx.bandwidth[std::size_t(m_mailbox.rank() * m_mailbox.world() + peer)];
}

std::int64_t DlionStrategy::linkBudget(int peer, double roundSeconds, const RoundContext &ctx)
{
    const std::int64_t length = m_trainer.parameterCount();
    if (!m_prioritized)
        return length;
    // The smallest payload that still measures its link (16 KiB: below
    // that, latency dominates the arrival time).
    std::int64_t probe = std::min<std::int64_t>(2048, length);
    const double bps = measuredBps(peer, ctx);
    if (bps <= 0 || roundSeconds <= 0)
        return probe;  // unmeasured: a dense first send could take minutes on a slow link
    // An entry costs 8 bytes (index + value).
    double entries = bps * roundSeconds / 8.0;
    double &credit = m_credit[std::size_t(peer)];
    if (entries >= double(probe)) {
        credit = 0;
        return std::min(length, std::int64_t(entries));
    }
    // A link too slow for a probe every round saves its budget up and sends
    // a probe once earned, so it costs the round no more than it can carry
    // on average; the residual keeps the gradient meanwhile.
    const double fits = bps * std::max(kMaxSendS, roundSeconds) / 8.0;
    if (fits < double(probe)) {
        probe = std::max<std::int64_t>(1, std::int64_t(fits));
        entries *= kCutLinkShare;
    }
    credit += entries;
    if (credit < double(probe))
        return 0;
    credit -= double(probe);
    return probe;
}

double DlionStrategy::roundBudget(const RoundContext &ctx)
{
    double computeS = 0;
    for (int j = 0; j < m_mailbox.world(); ++j) {
        if (ctx.rates[std::size_t(j)] > 0)
            computeS = std::max(computeS, double(m_shares[std::size_t(j)]) / ctx.rates[std::size_t(j)]);
    }
    // A round that ended in a knowledge transfer lasted the transfer too,
    // which the links' wait is not: counted, it read as 30-54 ms of wait on
    // the straggler pair and ended the pipelining for a window.
    if (m_roundStartS >= 0 && !m_transfer.ranAfter(ctx.round - 1)) {
        const double fixed = std::max(0.0, ctx.elapsedS - m_roundStartS - m_sendS);
        keepRecent(m_fixedS, fixed);
        keepRecent(m_waitS, std::max(0.0, fixed - computeS));
    }
    m_roundStartS = ctx.elapsedS;
    if (m_fixedS.empty())
        return computeS;
    // Over a full window, and its mean: a busy host's pair of workers
    // falls into rounds that alternate, one absorbing the other's
    // transfer, and the median of such a window reads no wait at all.
    // A pipelined round hides its wait behind the next one's compute; the
    // batch grows only in synchronous rounds, whose wait is the links'.
    if (computeS > 0 && m_waitS.size() == kBudgetWindow) {
        const double waitS = std::accumulate(m_waitS.begin(), m_waitS.end(), 0.0) / double(kBudgetWindow);
        m_proposal.growth = m_pipelined ? 1 : batchGrowthFor(waitS, computeS / double(m_roundGrowth), m_maxGrowth);
        const auto dense = std::size_t(std::count(m_dense.begin(), m_dense.end(), true));
        m_proposal.pipeline = m_pipeline && m_roundGrowth == 1
            && (m_pipelined ? 2 * dense > kBudgetWindow : dense == kBudgetWindow)
            && waitS < computeS * (m_pipelined ? kStayPipelinedBelow : kPipelineBelow);
    }
    // At most kMaxSendS: a stall the link estimates did not see would
    // otherwise pass for latency and size every payload to it.
    return std::max(computeS, std::min(kMaxSendS, medianOf(m_fixedS) / 2));
}

void DlionStrategy::exchange(torch::Tensor &grad, RoundContext &ctx)
{
    const int n = m_mailbox.world(), me = m_mailbox.rank();
    // What the links did not carry last round goes back into their residuals.
    for (int j = 0; j < n; ++j) {
        if (j != me) {
            for (const auto &late : m_mailbox.takeUndelivered(j))
                m_topk.giveBack(j, late);
        }
    }
    const double measured = roundBudget(ctx);
    const double roundSeconds = m_roundBudgetS > 0 ? m_roundBudgetS : measured;
    // Every peer sees a merge request, and the growth proposals, of the
    // same round.
    const std::int64_t share = m_shares[std::size_t(me)];
    const std::int64_t aux = HeaderWord{share, m_roundGrowth, m_proposal, ctx.mergeRequested}.encode();
    noteProposal(ctx.round, m_proposal);
    ctx.record->linkFraction.assign(std::size_t(n), 0.0);
    // The estimate lags a link that was just cut (or never measured): a
    // payload sized for it could occupy the link for minutes and trip the
    // group timeout. So each payload streams its entries largest first and
    // stops at a deadline; what missed it comes back next round.
    const double deadlineS = std::max(kMaxSendS, roundSeconds);
    m_sendS = 0;
    bool dense = true;
    for (int j = 0; j < n; ++j) {
        if (j == me)
            continue;
        const SparseGradient out = m_topk.select(j, grad, linkBudget(j, roundSeconds, ctx));
        dense = dense && out.values.numel() == grad.numel();
        ctx.record->linkFraction[std::size_t(j)] = double(out.values.numel()) / double(grad.numel());
        const double bps = measuredBps(j, ctx);
        if (bps > 0)
            m_sendS = std::max(m_sendS, double(out.wireBytes()) / bps);
        m_mailbox.sendGradient(j, ctx.round, out, ctx.elapsedS, Mailbox::Pending::Queue, deadlineS, aux);
    }
    keepRecent(m_dense, dense);
    if (ctx.mergeRequested)
        m_mergeRounds.insert(ctx.round);
    // Bounded staleness: every peer's payload of round k - s is in. FIFO
    // links mean all its earlier ones are too.
    const std::int64_t due = ctx.round - staleness();
    std::vector<std::int64_t> need(std::size_t(n), due);
    need[std::size_t(me)] = -1;
    const bool arrived = m_mailbox.waitForRounds(Mailbox::Kind::Data, need, ctx.keepWaiting);
    m_mailbox.report(*ctx.record, ctx.bandwidth);
    if (!arrived)
        return;  // the worker is leaving its group; this round's step is its own
    // Every payload that is in, each used once, weighted by the share its
    // sender computed over the global batch: each sample counts 1 / B
    // whichever round its payload arrives in. (Over the payloads that are in
    // instead, a round in which none arrived would step on this worker's
    // share alone, which for a slow worker is a few samples at the global
    // batch's learning rate: it diverged.)
    //
    // A payload computed at growth g is one share of a global batch g times
    // B, and the learning rate grows with sqrt(g) (the square-root rule of
    // Krizhevsky, "One weird trick", 2014: linear scaling diverged here at
    // 4x), so its samples count sqrt(g) / (g B) = 1 / (sqrt(g) B).
    std::vector<Mailbox::Message> in = m_mailbox.take(Mailbox::Kind::Data);
    const auto weight = [&](std::int64_t share, std::int64_t growth) {
        return double(share) / (double(m_batch * n) * std::sqrt(double(growth)));
    };
    grad.mul_(weight(share, m_roundGrowth));
    for (const auto &m : in) {
        const HeaderWord h = HeaderWord::decode(m.aux);
        if (m.payload.numel() > 0)  // empty: the link carried nothing this round
            sparse_codec::decodeFor(m.payload, grad.numel()).addTo(grad, weight(h.share, h.growth));
        if (h.merge)
            m_mergeRounds.insert(m.round);
        noteProposal(m.round, h.proposal);
    }
    // The next round's growth and pipelining: the least proposed in round
    // k - s, whose every payload is in here, so every worker takes the same
    // (a switch of pipelining skips or repeats a round k - s, on every
    // worker alike). A switch restarts the wait's window, which measured
    // the other kind of round.
    if (const auto it = m_proposals.find(due); it != m_proposals.end()) {
        m_growth = it->second.growth;
        if (std::exchange(m_pipelined, it->second.pipeline) != m_pipelined)
            m_waitS.clear();
    }
    m_proposals.erase(m_proposals.begin(), m_proposals.upper_bound(due));
    // A merge asked for in round r runs after round r + s, when every
    // worker is sure to have seen the request.
    m_mergeNow = m_mergeRounds.begin() != m_mergeRounds.upper_bound(due);
    m_mergeRounds.erase(m_mergeRounds.begin(), m_mergeRounds.upper_bound(due));
}

void DlionStrategy::noteProposal(std::int64_t round, Proposal proposal)
{
    const auto [it, fresh] = m_proposals.emplace(round, proposal);
    if (!fresh)
        it->second = {std::min(it->second.growth, proposal.growth), it->second.pipeline && proposal.pipeline};
}

void DlionStrategy::afterStep(RoundContext &ctx)
{
    if (m_mergeNow || (m_dkt && m_transfer.due(ctx.round)))
        m_transfer.run(m_trainer, m_mailbox, ctx, m_mergeNow, staleness() > 0);
}

} // namespace dlion::engine
