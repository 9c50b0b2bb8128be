#include "gaia_strategy.h"

#include "comm.h"
#include "strategy_options.h"
#include "trainer.h"

namespace dlion::engine {

GaiaStrategy::GaiaStrategy(const protocol::JobSpec &spec, Trainer &trainer, Comm &comm, const LinkEmulator &emulator)
    : m_trainer(trainer), m_batch(spec.batchSize), m_lr(spec.lr),
      m_accumulated(torch::zeros({trainer.parameterCount()})), m_exchange(comm, emulator)
{
    const StrategyOptions o(spec.strategyOptions, spec.strategy, {"threshold"});
    m_threshold = o.number("threshold", 0.01, 0, 10);
}

void GaiaStrategy::exchange(torch::Tensor &grad, RoundContext &ctx)
{
    m_accumulated.add_(grad);
    const auto significant = (m_accumulated * m_lr).abs() > m_trainer.flatParams().abs() * m_threshold;
    SparseGradient shared;
    shared.length = grad.numel();
    shared.indices = significant.nonzero().flatten();
    shared.values = m_accumulated.index_select(0, shared.indices);
    m_accumulated.index_fill_(0, shared.indices, 0.0);
    m_exchange.shareAndAverage(shared, grad, *ctx.record, ctx.bandwidth, ctx.elapsedS);
}

} // namespace dlion::engine
