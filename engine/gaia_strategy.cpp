#include "gaia_strategy.h"

#include "comm.h"
#include "strategy_options.h"
#include "trainer.h"

namespace dlion::engine {

GaiaStrategy::GaiaStrategy(const protocol::JobSpec &spec, Trainer &trainer, Comm &comm, const LinkEmulator &emulator)
    : m_trainer(trainer), m_comm(comm), m_batch(spec.batchSize), m_lr(spec.lr),
      m_accumulated(torch::zeros({trainer.parameterCount()})), m_exchange(comm, emulator)
{
    const StrategyOptions o(spec.strategyOptions, spec.strategy, {"threshold"});
    m_threshold = o.number("threshold", 0.01, 0, 10);
}

void GaiaStrategy::exchange(torch::Tensor &grad, RoundContext &ctx)
{
    const int n = m_comm.world(), me = m_comm.rank();
    m_accumulated.add_(grad);
    const auto significant = (m_accumulated * m_lr).abs() > m_trainer.flatParams().abs() * m_threshold;
    SparseGradient shared;
    shared.length = grad.numel();
    shared.indices = significant.nonzero().flatten();
    shared.values = m_accumulated.index_select(0, shared.indices);
    m_accumulated.index_fill_(0, shared.indices, 0.0);
    const std::vector<SparseGradient> out(std::size_t(n), shared);
    const std::vector<SparseGradient> in = m_exchange.exchange(out, ctx.elapsedS);
    const double fraction = double(shared.values.numel()) / double(grad.numel());
    ctx.record->linkFraction.assign(std::size_t(n), fraction);
    ctx.record->linkFraction[std::size_t(me)] = 0;
    m_exchange.report(*ctx.record, ctx.bandwidth);
    for (int j = 0; j < n; ++j) {
        if (j != me)
            in[std::size_t(j)].addTo(grad, 1.0);
    }
    grad.div_(n);
}

} // namespace dlion::engine
