#include "hop_strategy.h"

#include "comm.h"
#include "strategy_options.h"
#include "trainer.h"

#include <algorithm>
#include <limits>

namespace dlion::engine {

HopStrategy::HopStrategy(const protocol::JobSpec &spec, Trainer &trainer, Comm &comm, const LinkEmulator &emulator)
    : m_trainer(trainer), m_comm(comm), m_batch(spec.batchSize), m_exchange(comm, emulator)
{
    const StrategyOptions o(spec.strategyOptions, spec.strategy, {"backup", "topology"});
    m_backup = int(o.number("backup", 0, 0, 64));
    const QString topology = spec.strategyOptions.value("topology").toString(QStringLiteral("ring"));
    if (topology != QLatin1String("ring") && topology != QLatin1String("all"))
        throw EngineError("field \"strategy_options.topology\" must be \"ring\" or \"all\"");
    m_ring = topology == QLatin1String("ring");
}

std::vector<int> HopStrategy::inNeighbours(int worker, const std::vector<double> &bandwidth) const
{
    const int n = m_comm.world();
    std::vector<int> nb;
    for (int j = 0; j < n; ++j) {
        const bool adjacent = !m_ring || j == (worker + 1) % n || j == (worker + n - 1) % n;
        if (j != worker && adjacent)
            nb.push_back(j);
    }
    // Backup workers: drop the slowest incoming links as measured by their
    // receiver (deterministic, as every worker sees the same matrix, so all
    // agree who sends to whom); a link not measured yet counts as fast.
    auto rate = [&](int from) {
        const double bps = bandwidth.empty() ? 0 : bandwidth[std::size_t(from * n + worker)];
        return bps > 0 ? bps : std::numeric_limits<double>::infinity();
    };
    std::stable_sort(nb.begin(), nb.end(), [&](int a, int b) { return rate(a) > rate(b); });
    const int keep = std::max<int>(1, int(nb.size()) - m_backup);
    nb.resize(std::min<std::size_t>(nb.size(), std::size_t(keep)));
    return nb;
}

void HopStrategy::exchange(torch::Tensor &, RoundContext &)
{
    // Local SGD: the step uses this worker's own gradient.
}

void HopStrategy::afterStep(RoundContext &ctx)
{
    const int n = m_comm.world(), me = m_comm.rank();
    if (n < 2)
        return;
    SparseGradient mine;
    mine.length = m_trainer.parameterCount();
    mine.values = m_trainer.flatParams().clone();
    SparseGradient nothing;
    nothing.length = mine.length;
    nothing.values = torch::empty({0});
    std::vector<SparseGradient> out(std::size_t(n), nothing);
    for (int j = 0; j < n; ++j) {
        const auto nb = inNeighbours(j, ctx.bandwidth);
        if (j != me && std::find(nb.begin(), nb.end(), me) != nb.end())
            out[std::size_t(j)] = mine;
    }
    const std::vector<SparseGradient> in = m_exchange.exchange(out, ctx.elapsedS);
    const std::vector<int> nb = inNeighbours(me, ctx.bandwidth);
    torch::NoGradGuard noGrad;
    auto &w = m_trainer.flatParams();
    for (int j : nb)
        in[std::size_t(j)].addTo(w, 1.0);
    w.div_(double(nb.size() + 1));
    ctx.record->linkFraction.assign(std::size_t(n), 0.0);
    for (int j = 0; j < n; ++j)
        ctx.record->linkFraction[std::size_t(j)] = out[std::size_t(j)].values.numel() ? 1.0 : 0.0;
    ctx.record->linkFraction[std::size_t(me)] = 0;
    m_exchange.report(*ctx.record, ctx.bandwidth);
}

} // namespace dlion::engine
