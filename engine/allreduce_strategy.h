#pragma once

#include "strategy.h"

namespace dlion::engine {

// Bulk-synchronous data parallelism, as PyTorch DDP: every worker computes
// an equal batch, then a dense all-reduce averages the gradients, so all
// replicas take the same step and stay identical. No knobs. On emulated
// links the all-reduce lasts as long as a ring all-reduce over the caps:
// each worker moves 2(n-1)/n of the gradient to its ring successor, so the
// slowest ring link sets the pace. The round's control slots ride along
// with the gradient (RoundContext::gradWithControl): one collective a round.

class AllreduceStrategy : public Strategy {
public:
    AllreduceStrategy(const protocol::JobSpec &spec, Comm &comm);
    std::int64_t localBatch(const RoundContext &ctx) override;
    void exchange(torch::Tensor &grad, RoundContext &ctx) override;

private:
    Comm &m_comm;
    std::int64_t m_batch;
};

} // namespace dlion::engine
