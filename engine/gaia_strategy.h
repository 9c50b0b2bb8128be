#pragma once

#include "strategy.h"

namespace dlion::engine {

class Mailbox;

// Gaia (Hsieh et al., NSDI 2017), Approximate Synchronous Parallel, with
// every worker standing for one data centre. The paper's rule: a worker
// applies its own updates at once; it accumulates the update it actually
// applied (after the optimizer, momentum included) and sends to every peer,
// asynchronously, only the significant part: entries where |u| / |w|
// exceeds the threshold (knob `threshold`, default 0.01, the paper's 1%;
// the learning rate is constant here, so the threshold is too). The rest
// keeps accumulating until it becomes significant. Receivers add what
// arrives to their parameters as soon as they see it. When most entries are
// significant the update goes dense (an index list would cost more), and
// then, as with Gaia's selective barrier, a small barrier message goes
// first: a receiver that sees it waits for that update before its next
// step, so a large change is never half-seen. Each worker steps at
// lr / workers: the job's learning rate is for the global batch, as under
// every strategy, and every worker's update reaches every replica (at the
// job's rate, 4 workers apply 4 global steps' worth per round and diverge).
// Deviations: no mirror clock (the paper's bound on how far data centres'
// clocks drift, off by default there); one worker per data centre.
// Knobs: threshold.
class GaiaStrategy : public Strategy {
public:
    GaiaStrategy(const protocol::JobSpec &spec, Trainer &trainer, Mailbox &mailbox);
    std::int64_t localBatch(const RoundContext &) override { return m_batch; }
    void exchange(torch::Tensor &grad, RoundContext &ctx) override;
    void afterStep(RoundContext &ctx) override;
    std::vector<double> incomingBandwidth() const override;

private:
    Trainer &m_trainer;
    Mailbox &m_mailbox;
    std::int64_t m_batch;
    double m_threshold;
    torch::Tensor m_before;       // parameters before this round's step
    torch::Tensor m_accumulated;  // applied updates not yet significant
};

} // namespace dlion::engine
