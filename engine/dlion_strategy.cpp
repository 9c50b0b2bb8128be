#include "dlion_strategy.h"

#include "batch_shares.h"
#include "comm.h"
#include "strategy_options.h"
#include "trainer.h"

#include <algorithm>

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
} // namespace

DlionStrategy::DlionStrategy(const protocol::JobSpec &spec, Trainer &trainer, Comm &comm, const LinkEmulator &emulator)
    : m_trainer(trainer), m_comm(comm), m_batch(spec.batchSize),
      m_transfer(0.5, 500), m_exchange(comm, emulator), m_topk(comm.world(), trainer.parameterCount())
{
    const StrategyOptions o(spec.strategyOptions, spec.strategy,
                            {"wdb", "prioritized", "dkt", "min_share", "max_share", "round_budget_s", "dkt_period",
                             "dkt_alpha", "heldout_samples"});
    m_wdb = o.flag("wdb", true);
    m_prioritized = o.flag("prioritized", true);
    m_dkt = o.flag("dkt", true);
    m_minShare = std::int64_t(o.number("min_share", std::max(1, spec.batchSize / 8), 1, 65536));
    m_maxShare = std::int64_t(o.number("max_share", 4.0 * spec.batchSize, double(m_minShare), 1 << 20));
    m_roundBudgetS = o.number("round_budget_s", 0, 0, 3600);
    m_dktPeriod = std::int64_t(o.number("dkt_period", 50, 1, 1e9));
    m_transfer = KnowledgeTransfer(o.number("dkt_alpha", 0.5, 0, 1), std::int64_t(o.number("heldout_samples", 500, 10, 1e6)));
    m_shares.assign(std::size_t(comm.world()), m_batch);
    m_credit.assign(std::size_t(comm.world()), 0.0);
}

std::int64_t DlionStrategy::localBatch(const RoundContext &ctx)
{
    if (m_wdb)
        m_shares = computeShares(ctx.rates, m_batch * m_comm.world(), m_minShare, m_maxShare);
    return m_shares[std::size_t(m_comm.rank())];
}

std::int64_t DlionStrategy::linkBudget(int peer, double roundSeconds, const RoundContext &ctx)
{
    const std::int64_t length = m_trainer.parameterCount();
    if (!m_prioritized)
        return length;
    // The smallest payload that still measures its link (16 KiB: below
    // that, latency dominates the arrival time).
    std::int64_t probe = std::min<std::int64_t>(2048, length);
    const double bps = ctx.bandwidth.empty() ? 0 : ctx.bandwidth[std::size_t(m_comm.rank() * m_comm.world() + peer)];
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

void DlionStrategy::exchange(torch::Tensor &grad, RoundContext &ctx)
{
    const int n = m_comm.world(), me = m_comm.rank();
    double total = 0;
    for (auto s : m_shares)
        total += double(s);
    // The round's time budget: how long the slowest share takes to compute.
    double roundSeconds = m_roundBudgetS;
    if (roundSeconds <= 0) {
        for (int j = 0; j < n; ++j) {
            if (ctx.rates[std::size_t(j)] > 0)
                roundSeconds = std::max(roundSeconds, double(m_shares[std::size_t(j)]) / ctx.rates[std::size_t(j)]);
        }
    }
    std::vector<SparseGradient> out(static_cast<std::size_t>(n));
    for (int j = 0; j < n; ++j) {
        if (j != me)
            out[std::size_t(j)] = m_topk.select(j, grad, linkBudget(j, roundSeconds, ctx));
    }
    // The estimate lags a link that was just cut (or never measured): a
    // payload sized for it could occupy the link for minutes and trip the
    // group timeout. So each payload streams its entries largest first and
    // stops at a deadline; what missed it goes back into the link's residual.
    std::vector<SparseGradient> late;
    const std::vector<SparseGradient> in = m_exchange.exchange(out, ctx.elapsedS, std::max(kMaxSendS, roundSeconds), &late);
    ctx.record->linkFraction.assign(std::size_t(n), 0.0);
    for (int j = 0; j < n; ++j) {
        if (j == me)
            continue;
        m_topk.giveBack(j, late[std::size_t(j)]);
        ctx.record->linkFraction[std::size_t(j)] =
            double(out[std::size_t(j)].values.numel() - late[std::size_t(j)].values.numel()) / double(grad.numel());
    }
    grad.mul_(double(m_shares[std::size_t(me)]) / total);
    for (int j = 0; j < n; ++j) {
        if (j != me)
            in[std::size_t(j)].addTo(grad, double(m_shares[std::size_t(j)]) / total);
    }
    m_exchange.report(*ctx.record, ctx.bandwidth);
}

void DlionStrategy::afterStep(RoundContext &ctx)
{
    if (ctx.mergeRequested || (m_dkt && (ctx.round + 1) % m_dktPeriod == 0))
        m_transfer.run(m_trainer, m_comm, ctx.bandwidth, ctx.round, ctx.elapsedS, ctx.mergeRequested, ctx.emitMerge);
}

} // namespace dlion::engine
