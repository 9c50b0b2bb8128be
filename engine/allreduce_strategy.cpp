#include "allreduce_strategy.h"

#include "comm.h"
#include "link_emulator.h"

#include <chrono>
#include <thread>

namespace dlion::engine {

AllreduceStrategy::AllreduceStrategy(const protocol::JobSpec &spec, Comm &comm, const LinkEmulator &emulator)
    : m_comm(comm), m_emulator(emulator), m_batch(spec.batchSize)
{}

std::int64_t AllreduceStrategy::localBatch(const RoundContext &) { return m_batch; }

void AllreduceStrategy::exchange(torch::Tensor &grad, RoundContext &ctx)
{
    const int n = m_comm.world();
    const auto start = std::chrono::steady_clock::now();
    m_comm.allreduceSum(grad);
    grad.div_(n);
    const double bytes = 2.0 * (n - 1) / n * double(grad.numel() * grad.element_size());
    double ringSeconds = 0;
    for (int i = 0; i < n && n > 1; ++i)
        ringSeconds = std::max(ringSeconds, m_emulator.transferSeconds(i, (i + 1) % n, bytes, ctx.elapsedS));
    std::this_thread::sleep_until(start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                              std::chrono::duration<double>(ringSeconds)));
    ctx.record->bytesSent = std::int64_t(bytes);
    ctx.record->linkFraction.assign(std::size_t(n), 0.0);
    ctx.record->linkMbps.assign(std::size_t(n), 0.0);
    ctx.record->linkBytes.assign(std::size_t(n), 0.0);
    if (n > 1) {
        const int next = (m_comm.rank() + 1) % n;
        ctx.record->linkFraction[std::size_t(next)] = 1.0;
        ctx.record->linkBytes[std::size_t(next)] = bytes;
        ctx.record->linkMbps[std::size_t(next)] = m_emulator.capMbps(m_comm.rank(), next, ctx.elapsedS);
    }
}

} // namespace dlion::engine
