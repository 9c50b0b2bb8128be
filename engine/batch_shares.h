#pragma once

#include <cstdint>
#include <vector>

namespace dlion::engine {

// Weighted dynamic batching: splits a global batch over workers in
// proportion to their measured compute rates, each share clamped to
// [minShare, maxShare]. The shares always sum to `globalBatch` (largest
// remainder rounding; clamps are relaxed only when they cannot all hold).
// Rates <= 0 (not measured yet) count as the mean of the measured ones, or
// equal shares when none is measured.
std::vector<std::int64_t> computeShares(const std::vector<double> &rates, std::int64_t globalBatch,
                                        std::int64_t minShare, std::int64_t maxShare);

// How much a synchronous round's batch may grow: the largest power of two
// g <= maxGrowth whose compute, g x `computeS` (the round's compute at
// growth 1), is at most the time a round waits beyond it (`waitS`: the
// links' latency and transfer, the exchange's processing). Where the round
// waits less than it computes, 1.
std::int64_t batchGrowthFor(double waitS, double computeS, std::int64_t maxGrowth);

} // namespace dlion::engine
