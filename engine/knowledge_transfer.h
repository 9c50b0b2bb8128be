#pragma once

#include <telemetry.h>

#include <torch/types.h>

#include <functional>

namespace dlion::engine {

class Comm;
class LinkEmulator;
class Trainer;

// Direct knowledge transfer: workers score their replicas on the held-out
// batch they all share; every worker weaker than the best one pulls its
// parameters towards the best: w <- (1 - alpha) w + alpha w_best.
// A collective: every worker calls run() in the same round.
class KnowledgeTransfer {
public:
    KnowledgeTransfer(double alpha, std::int64_t heldOutSamples) : m_alpha(alpha), m_heldOut(heldOutSamples) {}

    static void merge(torch::Tensor &weights, const torch::Tensor &best, double alpha)
    {
        weights.mul_(1 - alpha).add_(best, alpha);
    }

    // Returns the merge this worker took part in as receiver, if any.
    void run(Trainer &trainer, Comm &comm, const LinkEmulator &emulator, std::int64_t round, double t, bool manual,
             const std::function<void(const protocol::MergeEvent &)> &emit);

private:
    double m_alpha;
    std::int64_t m_heldOut;
};

} // namespace dlion::engine
