#pragma once

#include "strategy.h"

#include <memory>

namespace dlion::engine {

class OverlappedAllreduce;
class Trainer;

// Bulk-synchronous data parallelism, as PyTorch DDP: every worker computes
// an equal batch, then a dense all-reduce averages the gradients, so all
// replicas take the same step and stay identical. On emulated links the
// all-reduce lasts as long as a ring all-reduce over the caps: each worker
// moves 2(n-1)/n of the gradient to its ring successor, so the slowest ring
// link sets the pace. The round's control slots ride along with the
// gradient (RoundContext::gradWithControl): no collective of their own.
//
// As DDP's reducer, the gradient goes in buckets (knob bucket_mb, DDP's
// bucket_cap_mb, first bucket at most 1 MB) that are all-reduced while
// backward still runs (gradient_buckets.h); a model that fits one bucket
// (LeNet-5) is all-reduced after backward, as under DDP.
class AllreduceStrategy : public Strategy {
public:
    // `overlapWith`: the trainer whose backward the buckets overlap; null
    // all-reduces after backward only.
    AllreduceStrategy(const protocol::JobSpec &spec, Comm &comm, Trainer *overlapWith = nullptr);
    ~AllreduceStrategy() override;
    std::int64_t localBatch(const RoundContext &ctx) override;
    void beginCompute(RoundContext &ctx) override;
    void exchange(torch::Tensor &grad, RoundContext &ctx) override;

private:
    Comm &m_comm;
    Trainer *m_trainer;
    std::int64_t m_batch;
    double m_bucketBytes;
    std::unique_ptr<OverlappedAllreduce> m_buckets;
};

} // namespace dlion::engine
