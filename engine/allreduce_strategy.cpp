#include "allreduce_strategy.h"

#include "comm.h"

namespace dlion::engine {

AllreduceStrategy::AllreduceStrategy(const protocol::JobSpec &spec, Comm &comm)
    : m_comm(comm), m_batch(spec.batchSize)
{}

std::int64_t AllreduceStrategy::localBatch(const RoundContext &) { return m_batch; }

void AllreduceStrategy::exchange(torch::Tensor &grad, RoundContext &ctx)
{
    const int n = m_comm.world();
    m_comm.allreduceSum(grad);
    grad.div_(n);
    // A ring all-reduce sends 2(n-1)/n of the buffer per worker, spread over
    // its links.
    const double bytes = 2.0 * (n - 1) / n * double(grad.numel() * grad.element_size());
    ctx.record->bytesSent = std::int64_t(bytes);
    ctx.record->linkFraction.assign(std::size_t(n), n > 1 ? 1.0 : 0.0);
    ctx.record->linkFraction[std::size_t(m_comm.rank())] = 0.0;
}

} // namespace dlion::engine
