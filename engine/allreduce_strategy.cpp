#include "allreduce_strategy.h"

#include "comm.h"
#include "engine_log.h"
#include "gradient_buckets.h"
#include "strategy_options.h"
#include "trainer.h"

#include <chrono>

namespace dlion::engine {

namespace {
// DDP's first bucket (torch.distributed's _DEFAULT_FIRST_BUCKET_BYTES):
// small, so the first all-reduce starts early in backward.
constexpr double kFirstBucketBytes = 1024.0 * 1024.0;
} // namespace

AllreduceStrategy::AllreduceStrategy(const protocol::JobSpec &spec, Comm &comm, Trainer *overlapWith)
    : m_comm(comm), m_trainer(overlapWith), m_batch(spec.batchSize),
      m_bucketBytes(StrategyOptions(spec.strategyOptions, QStringLiteral("allreduce")).number("bucket_mb") * 1024 * 1024)
{}

AllreduceStrategy::~AllreduceStrategy() = default;

std::int64_t AllreduceStrategy::localBatch(const RoundContext &) { return m_batch; }

void AllreduceStrategy::beginCompute(RoundContext &ctx)
{
    if (!m_trainer || m_bucketBytes <= 0 || m_comm.world() < 2 || !ctx.gradWithControl.defined())
        return;
    // Laid out once the first round brings the buffer the control slots head.
    if (!m_buckets) {
        m_buckets = std::make_unique<OverlappedAllreduce>(
            m_comm, m_trainer->model().parameters(), ctx.gradWithControl,
            ctx.gradWithControl.numel() - m_trainer->parameterCount(), std::min(kFirstBucketBytes, m_bucketBytes),
            m_bucketBytes);
        qCInfo(lcEngine) << "rank" << m_comm.rank() << "all-reduces its gradient in" << m_buckets->buckets().size()
                         << "buckets, all but the last while backward runs";
    }
    m_buckets->begin(ctx.paceCompute);
}

void AllreduceStrategy::exchange(torch::Tensor &grad, RoundContext &ctx)
{
    const int n = m_comm.world();
    // Comm paces the ring on the emulated links: 2(n-1) steps of bytes/n.
    double total = 0, seconds = 0;
    if (m_buckets) {
        const OverlappedAllreduce::Result r = m_buckets->finish();
        total = r.bytes;
        seconds = r.busyS;
    } else {
        torch::Tensor &sent = ctx.gradWithControl.defined() ? ctx.gradWithControl : grad;
        const auto start = std::chrono::steady_clock::now();
        m_comm.allreduceSum(sent);
        seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        total = double(sent.numel() * sent.element_size());
    }
    grad.div_(n);
    const double bytes = 2.0 * (n - 1) / n * total;
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
