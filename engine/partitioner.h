#pragma once

#include <cstdint>
#include <vector>

namespace dlion::engine {

// Splits sample indices over workers. alpha <= 0 gives an iid split (shuffled,
// equal sizes within one). alpha > 0 gives the usual non-iid split: for each
// class, worker proportions are drawn from Dirichlet(alpha), so small alpha
// means strong label skew. Every worker gets at least `minPerWorker` samples
// (draws are repeated, boundedly, until it holds). Deterministic in `seed`.
std::vector<std::vector<std::int64_t>> partitionIndices(const std::vector<std::uint8_t> &labels, int classes,
                                                        int workers, double alpha, std::uint64_t seed,
                                                        std::int64_t minPerWorker = 10);

} // namespace dlion::engine
