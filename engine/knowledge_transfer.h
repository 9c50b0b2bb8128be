#pragma once

#include <telemetry.h>

#include <torch/types.h>

#include <functional>
#include <vector>

namespace dlion::engine {

class Mailbox;
class Trainer;
struct RoundContext;

// Direct knowledge transfer: workers score their replicas on the held-out
// batch they all share; every worker weaker than the best one pulls its
// parameters and buffers (BatchNorm statistics) towards the best:
// w <- (1 - alpha) w + alpha w_best.
// Every worker calls run() in the same round: the scores go to every peer,
// and the best worker sends each peer its model, or an empty message to a
// peer that sits the merge out, so every worker knows what to wait for.
class KnowledgeTransfer {
public:
    KnowledgeTransfer(double alpha, std::int64_t heldOutSamples) : m_alpha(alpha), m_heldOut(heldOutSamples) {}

    static void merge(torch::Tensor &weights, const torch::Tensor &best, double alpha)
    {
        weights.mul_(1 - alpha).add_(best, alpha);
    }

    // A worker whose link from the best one would take over 5 s to carry
    // the model, as measured (ctx.bandwidth, bytes/s), or is not measured
    // yet, sits the merge out.
    void run(Trainer &trainer, Mailbox &mailbox, const RoundContext &ctx, bool manual);

private:
    double m_alpha;
    std::int64_t m_heldOut;
};

} // namespace dlion::engine
