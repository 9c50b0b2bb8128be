#include "hop_strategy.h"

#include "comm.h"
#include "link_emulator.h"
#include "strategy_options.h"
#include "trainer.h"

#include <algorithm>

namespace dlion::engine {

HopStrategy::HopStrategy(const protocol::JobSpec &spec, Trainer &trainer, Comm &comm, const LinkEmulator &emulator)
    : m_trainer(trainer), m_comm(comm), m_emulator(emulator), m_batch(spec.batchSize), m_exchange(comm, emulator)
{
    const StrategyOptions o(spec.strategyOptions, spec.strategy, {"backup", "topology"});
    m_backup = int(o.number("backup", 0, 0, 64));
    const QString topology = spec.strategyOptions.value("topology").toString(QStringLiteral("ring"));
    if (topology != QLatin1String("ring") && topology != QLatin1String("all"))
        throw EngineError("field \"strategy_options.topology\" must be \"ring\" or \"all\"");
    m_ring = topology == QLatin1String("ring");
}

std::vector<int> HopStrategy::inNeighbours(int worker, double t) const
{
    const int n = m_comm.world();
    std::vector<int> nb;
    for (int j = 0; j < n; ++j) {
        const bool adjacent = !m_ring || j == (worker + 1) % n || j == (worker + n - 1) % n;
        if (j != worker && adjacent)
            nb.push_back(j);
    }
    // Backup workers: drop the slowest incoming links (deterministic, so
    // every worker agrees who sends to whom).
    const double bytes = double(m_trainer.parameterCount()) * 4;
    std::stable_sort(nb.begin(), nb.end(), [&](int a, int b) {
        return m_emulator.transferSeconds(a, worker, bytes, t) < m_emulator.transferSeconds(b, worker, bytes, t);
    });
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
        const auto nb = inNeighbours(j, ctx.elapsedS);
        if (j != me && std::find(nb.begin(), nb.end(), me) != nb.end())
            out[std::size_t(j)] = mine;
    }
    const std::vector<SparseGradient> in = m_exchange.exchange(out, ctx.elapsedS);
    const std::vector<int> nb = inNeighbours(me, ctx.elapsedS);
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
