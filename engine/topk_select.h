#pragma once

#include <cstdint>

namespace dlion::engine::topk {

// The reference top-k selection, torch-free, shared by the engine's CPU path
// and the CUDA kernel (engine/cuda/), which must give identical results.
//
// Rank of an entry: the bit pattern of |v| (sign bit cleared) descending,
// then its index ascending. Non-negative floats order like their bits, so
// this is |v| descending with ties to the lower index; -0 ties with +0, and
// NaN ranks above +inf (as in torch.topk), NaNs among themselves by payload.
// The k best-ranked entries are written with indices ascending, each value
// being acc[index] with its sign (indices and values hold k entries). k is
// clamped to [0, n]; n must be below 2^32 (std::invalid_argument otherwise).
void select(const float *acc, std::int64_t n, std::int64_t k, std::int64_t *indices, float *values);

} // namespace dlion::engine::topk
