#pragma once

#include "strategy.h"

namespace dlion::engine {

class Mailbox;

// Ako (Watcharapichat et al., "Ako: Decentralised Deep Learning with
// Partial Gradient Exchange", SoCC 2016), asynchronous. The paper's rule:
// every worker computes without waiting for anyone; it accumulates its
// gradients, splits the accumulation into p partitions and, in its round t,
// sends partition t mod p to every peer and clears it, so each gradient
// entry reaches every replica exactly once. What arrives is summed into
// the next step's gradient (as TF.AKO does: sum, not mean). The job's
// learning rate is for the global batch (workers x batch_size), as under
// every strategy, while each gradient here is applied alone: the sum is
// stepped at lr / workers, the linear scaling rule, which is TF.AKO's sum
// at a per-worker learning rate (at the job's rate, 4 workers diverge).
// p is chosen so
// that the bandwidth a worker uses stays within its links: the smallest p
// for which a partition per round of this worker's measured speed fits the
// slowest outgoing link that its receiver has measured (links not measured
// yet are idle and constrain nothing); knob `partitions` fixes p instead.
// Until the worker's own rate is measured, p keeps its first value:
// partitions of about 64 KiB.
// Deviation: the paper profiles p once; here it follows the measurements.
// Knobs: partitions (0 = auto, the default).
class AkoStrategy : public Strategy {
public:
    AkoStrategy(const protocol::JobSpec &spec, Trainer &trainer, Mailbox &mailbox);
    std::int64_t localBatch(const RoundContext &) override { return m_batch; }
    void exchange(torch::Tensor &grad, RoundContext &ctx) override;
    std::vector<double> incomingBandwidth() const override;

private:
    std::int64_t partitions(const RoundContext &ctx) const;

    Mailbox &m_mailbox;
    std::int64_t m_batch;
    std::int64_t m_fixedPartitions;  // 0 = auto
    std::int64_t m_partitions = 1;
    torch::Tensor m_accumulated;
};

} // namespace dlion::engine
