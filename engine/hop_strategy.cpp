#include "hop_strategy.h"

#include "mailbox.h"
#include "sparse_codec.h"
#include "strategy_options.h"
#include "trainer.h"

#include <algorithm>

namespace dlion::engine {

HopStrategy::HopStrategy(const protocol::JobSpec &spec, Trainer &trainer, Mailbox &mailbox)
    : m_trainer(trainer), m_mailbox(mailbox), m_batch(spec.batchSize)
{
    const StrategyOptions o(spec.strategyOptions, spec.strategy);
    m_staleness = int(o.number("staleness"));
    m_backup = int(o.number("backup"));
    m_skip = o.flag("skip");
    const QString topology = o.choice("topology");
    const int n = mailbox.world(), me = mailbox.rank();
    for (int j = 0; j < n; ++j) {
        const bool adjacent = topology == QLatin1String("all") || j == (me + 1) % n || j == (me + n - 1) % n;
        if (j != me && adjacent)
            m_neighbours.push_back(j);
    }
}

std::vector<double> HopStrategy::incomingBandwidth() const { return m_mailbox.incomingBandwidth(); }

void HopStrategy::exchange(torch::Tensor &, RoundContext &)
{
    // Local SGD: the step uses this worker's own gradient.
}

void HopStrategy::afterStep(RoundContext &ctx)
{
    const int n = m_mailbox.world();
    if (m_neighbours.empty())
        return;
    if (m_iteration < 0)
        m_iteration = ctx.round;  // every member starts a group at the source's round
    const std::int64_t k = m_iteration;
    // Neighbours average whole models: parameters and buffers.
    auto &w = m_trainer.flatState();

    SparseGradient mine;
    mine.length = w.numel();
    mine.values = w.clone();
    // A model the link has not started yet is stale: the newer one replaces it.
    for (int j : m_neighbours)
        m_mailbox.sendGradient(j, k, mine, ctx.elapsedS, Mailbox::Pending::Replace);

    // The staleness bound, relaxed by the backups: deg - b neighbours at
    // iteration k - s or later.
    const int need = std::max<int>(0, int(m_neighbours.size()) - m_backup);
    const std::int64_t oldest = k - m_staleness;
    auto fresh = [&](const std::vector<std::int64_t> &latest) {
        return int(std::count_if(m_neighbours.begin(), m_neighbours.end(),
                                 [&](int j) { return latest[std::size_t(j)] >= oldest; }));
    };
    const bool ready = m_mailbox.waitUntil(Mailbox::Kind::Data, [&](const std::vector<std::int64_t> &latest) { return fresh(latest) >= need; },
                                           ctx.keepWaiting);

    // Each neighbour's newest update within the bound, used once; older
    // ones in its queue are skipped.
    std::vector<torch::Tensor> newest(static_cast<std::size_t>(n));
    std::vector<std::int64_t> newestRound(std::size_t(n), -1);
    for (auto &m : m_mailbox.take(Mailbox::Kind::Data)) {
        if (m.round >= oldest && m.round >= newestRound[std::size_t(m.from)]) {
            newestRound[std::size_t(m.from)] = m.round;
            newest[std::size_t(m.from)] = m.payload;
        }
    }
    if (ready) {
        torch::NoGradGuard noGrad;
        const double weight = 1.0 / double(m_neighbours.size() + 1);
        int mixed = 0;
        auto sum = torch::zeros_like(w);
        for (int j : m_neighbours) {
            if (!newest[std::size_t(j)].defined())
                continue;
            sparse_codec::decodeFor(newest[std::size_t(j)], w.numel()).addTo(sum, 1.0);
            ++mixed;
        }
        w.mul_(1.0 - weight * mixed).add_(sum, weight);
    }

    ctx.record->linkFraction.assign(std::size_t(n), 0.0);
    for (int j : m_neighbours)
        ctx.record->linkFraction[std::size_t(j)] = 1.0;
    m_mailbox.report(*ctx.record, ctx.bandwidth);

    m_iteration = k + 1;
    if (m_skip) {
        const auto latest = m_mailbox.latestRounds(Mailbox::Kind::Data);
        std::int64_t behind = latest[std::size_t(m_neighbours.front())];
        for (int j : m_neighbours)
            behind = std::min(behind, latest[std::size_t(j)]);
        m_iteration = std::max(m_iteration, behind);
    }
}

} // namespace dlion::engine
