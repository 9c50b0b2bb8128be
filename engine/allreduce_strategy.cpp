#include "allreduce_strategy.h"

#include "comm.h"

#include <chrono>

namespace dlion::engine {

AllreduceStrategy::AllreduceStrategy(const protocol::JobSpec &spec, Comm &comm)
    : m_comm(comm), m_batch(spec.batchSize)
{}

std::int64_t AllreduceStrategy::localBatch(const RoundContext &) { return m_batch; }

void AllreduceStrategy::exchange(torch::Tensor &grad, RoundContext &ctx)
{
    const int n = m_comm.world();
    // Comm paces the ring on the emulated links: 2(n-1) steps of bytes/n.
    torch::Tensor &sent = ctx.gradWithControl.defined() ? ctx.gradWithControl : grad;
    const auto start = std::chrono::steady_clock::now();
    m_comm.allreduceSum(sent);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    grad.div_(n);
    const double bytes = 2.0 * (n - 1) / n * double(sent.numel() * sent.element_size());
    ctx.record->bytesSent = std::int64_t(bytes);
    ctx.record->linkFraction.assign(std::size_t(n), 0.0);
    ctx.record->linkMbps.assign(std::size_t(n), 0.0);
    ctx.record->linkBytes.assign(std::size_t(n), 0.0);
    if (n > 1) {
        const int next = (m_comm.rank() + 1) % n;
        ctx.record->linkFraction[std::size_t(next)] = 1.0;
        ctx.record->linkBytes[std::size_t(next)] = bytes;
        // What the ring achieved on this worker's link, latency included.
        ctx.record->linkMbps[std::size_t(next)] = seconds > 0 ? bytes * 8e-6 / seconds : 0;
    }
}

} // namespace dlion::engine
