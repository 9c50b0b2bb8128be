#pragma once

#include "sparse_codec.h"

#include <vector>

namespace dlion::engine {

// Top-k selection with per-link error feedback. For each link, what was not
// sent stays in that link's residual and is added to the next gradient, so
// every produced gradient entry reaches the peer eventually: over any number
// of rounds, sent + residual == produced, exactly.
class ResidualTopK {
public:
    ResidualTopK(int links, std::int64_t length);

    // acc = residual[link] + grad; sends the k largest |acc| (all of acc,
    // dense, when k >= length or a sparse payload would be larger) and keeps
    // the rest as the new residual. k <= 0 sends nothing (an empty payload).
    // The k entries are topk::select's (engine/topk_select.h), indices
    // ascending; on a CUDA build with a device, vectors of 2^20 entries or
    // more are selected on the GPU, with identical results.
    SparseGradient select(int link, const torch::Tensor &grad, std::int64_t k);
    // Entries selected for `link` that did not reach it go back into its
    // residual, so sent + residual == produced still holds.
    void giveBack(int link, const SparseGradient &undelivered) { undelivered.addTo(m_residual[std::size_t(link)], 1.0); }
    const torch::Tensor &residual(int link) const { return m_residual[std::size_t(link)]; }

private:
    // False where this build or machine has no usable GPU path.
    bool selectOnGpu(const float *acc, std::int64_t k, std::int64_t *indices, float *values);

    std::vector<torch::Tensor> m_residual;
    std::int64_t m_length;
    bool m_gpu = false;
};

} // namespace dlion::engine
