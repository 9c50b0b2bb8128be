#pragma once

#include <telemetry.h>

#include <torch/types.h>

#include <functional>
#include <vector>

namespace dlion::engine {

class Comm;
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

    // `bandwidth`: the shared n x n matrix of measured link rates (bytes/s);
    // a worker whose link from the best one would take over 5 s to carry
    // the model, or is not measured yet, sits the merge out.
    void run(Trainer &trainer, Comm &comm, const std::vector<double> &bandwidth, std::int64_t round, double t, bool manual,
             const std::function<void(const protocol::MergeEvent &)> &emit);

private:
    double m_alpha;
    std::int64_t m_heldOut;
};

} // namespace dlion::engine
