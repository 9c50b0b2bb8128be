#include "ako_strategy.h"

#include "mailbox.h"
#include "sparse_codec.h"
#include "strategy_options.h"
#include "trainer.h"

#include <algorithm>
#include <cmath>

namespace dlion::engine {

namespace {
constexpr std::int64_t kMaxPartitions = 256;
}

AkoStrategy::AkoStrategy(const protocol::JobSpec &spec, Trainer &trainer, Mailbox &mailbox)
    : m_mailbox(mailbox), m_batch(spec.batchSize), m_accumulated(torch::zeros({trainer.parameterCount()}))
{
    constexpr double kFirstPartitionBytes = 64 * 1024;
    m_partitions = std::clamp<std::int64_t>(std::int64_t(std::ceil(double(trainer.parameterCount()) * 4 / kFirstPartitionBytes)),
                                            1, kMaxPartitions);
    const StrategyOptions o(spec.strategyOptions, spec.strategy);
    m_fixedPartitions = std::int64_t(o.number("partitions"));
}

std::vector<double> AkoStrategy::incomingBandwidth() const { return m_mailbox.incomingBandwidth(); }

std::int64_t AkoStrategy::partitions(const RoundContext &ctx) const
{
    if (m_fixedPartitions > 0)
        return m_fixedPartitions;
    const int me = m_mailbox.rank(), n = m_mailbox.world();
    const double rate = ctx.rates[std::size_t(me)];
    if (rate <= 0)
        return m_partitions;
    const double bytesPerSecond = double(m_accumulated.numel()) * 4 * rate / double(m_batch);  // p = 1
    double p = 1;
    for (int j = 0; j < n; ++j) {
        const double bps = ctx.bandwidth.empty() || j == me ? 0 : ctx.bandwidth[std::size_t(me * n + j)];
        if (bps > 0)
            p = std::max(p, std::ceil(bytesPerSecond / bps));
    }
    return std::clamp<std::int64_t>(std::int64_t(p), 1, kMaxPartitions);
}

void AkoStrategy::exchange(torch::Tensor &grad, RoundContext &ctx)
{
    const int n = m_mailbox.world(), me = m_mailbox.rank();
    m_accumulated.add_(grad);
    m_partitions = partitions(ctx);
    const std::int64_t length = grad.numel();
    const std::int64_t chunk = (length + m_partitions - 1) / m_partitions;
    const std::int64_t offset = std::min(length, (ctx.round % m_partitions) * chunk);
    SparseGradient part;
    part.length = length;
    part.offset = offset;
    auto slice = m_accumulated.narrow(0, offset, std::min(chunk, length - offset));
    part.values = slice.clone();
    slice.zero_();
    // A partition the link has not started yet absorbs this one.
    for (int j = 0; j < n; ++j) {
        if (j != me)
            m_mailbox.sendGradient(j, ctx.round, part, ctx.elapsedS, Mailbox::Pending::Add);
    }
    for (const auto &m : m_mailbox.take(Mailbox::Kind::Data))
        sparse_codec::decodeFor(m.payload, length).addTo(grad, 1.0);
    // Every gradient is applied once per replica, each on batch_size samples:
    // at the job's rate for the global batch over the workers (linear scaling).
    grad.div_(n);
    ctx.record->linkFraction.assign(std::size_t(n), double(part.values.numel()) / double(length));
    ctx.record->linkFraction[std::size_t(me)] = 0;
    m_mailbox.report(*ctx.record, ctx.bandwidth);
}

} // namespace dlion::engine
