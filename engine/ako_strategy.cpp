#include "ako_strategy.h"

#include "comm.h"
#include "strategy_options.h"
#include "trainer.h"

#include <algorithm>
#include <cmath>

namespace dlion::engine {

AkoStrategy::AkoStrategy(const protocol::JobSpec &spec, Trainer &trainer, Comm &comm, const LinkEmulator &emulator)
    : m_comm(comm), m_batch(spec.batchSize), m_accumulated(torch::zeros({trainer.parameterCount()})),
      m_exchange(comm, emulator)
{
    constexpr double kFirstPartitionBytes = 64 * 1024;
    m_partitions = std::clamp<std::int64_t>(std::int64_t(std::ceil(double(trainer.parameterCount()) * 4 / kFirstPartitionBytes)), 1, 256);
    const StrategyOptions o(spec.strategyOptions, spec.strategy, {"partitions"});
    m_fixedPartitions = std::int64_t(o.number("partitions", 0, 0, 4096));
}

std::int64_t AkoStrategy::partitions(const RoundContext &ctx) const
{
    if (m_fixedPartitions > 0)
        return m_fixedPartitions;
    const int me = m_comm.rank();
    const double rate = ctx.rates[std::size_t(me)];
    if (rate <= 0)
        return m_partitions;  // keep the last choice until the rate is measured
    const double roundSeconds = double(m_batch) / rate;
    const double bytes = double(m_accumulated.numel()) * 4;
    const int n = m_comm.world();
    double slowest = 0;
    for (int j = 0; j < n; ++j) {
        const double bps = ctx.bandwidth.empty() ? 0 : ctx.bandwidth[std::size_t(me * n + j)];
        if (j == me)
            continue;
        if (bps <= 0)
            return m_partitions;
        slowest = std::max(slowest, bytes / bps);
    }
    return std::clamp<std::int64_t>(std::int64_t(std::ceil(slowest / roundSeconds)), 1, 256);
}

void AkoStrategy::exchange(torch::Tensor &grad, RoundContext &ctx)
{
    m_accumulated.add_(grad);
    m_partitions = partitions(ctx);
    const std::int64_t length = grad.numel();
    const std::int64_t chunk = (length + m_partitions - 1) / m_partitions;
    const std::int64_t offset = std::min(length, (ctx.round % m_partitions) * chunk);
    SparseGradient part;
    part.length = length;
    part.offset = offset;
    part.values = m_accumulated.narrow(0, offset, std::min(chunk, length - offset)).clone();
    m_accumulated.narrow(0, offset, part.values.numel()).zero_();
    m_exchange.shareAndAverage(part, grad, *ctx.record, ctx.bandwidth, ctx.elapsedS);
}

} // namespace dlion::engine
