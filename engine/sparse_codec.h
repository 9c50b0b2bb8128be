#pragma once

#include <torch/types.h>

#include <cstdint>

namespace dlion::engine {

// The wire form of a (possibly sparse) gradient slice sent over c10d:
// one int32 tensor  [magic, count, length, offset, indices..., value bits...].
// `length` is the size of the dense vector the entries index into; a dense
// payload has count == length and no index list. `offset` places a dense
// slice (Ako's partitions) inside a larger vector. Integrity and origin are
// the Mailbox's MAC; decoding checks that the payload fits the receiver's
// model and holds only finite values.
struct SparseGradient {
    torch::Tensor indices;  // int64, empty for dense
    torch::Tensor values;   // float32
    std::int64_t length = 0;
    std::int64_t offset = 0;

    bool dense() const { return !indices.defined() || indices.numel() == 0; }
    std::int64_t wireBytes() const;
    // Adds scale * this into `target` (a dense float vector of `length`+offset).
    void addTo(torch::Tensor &target, double scale) const;
    // The `m` entries of largest magnitude, as a sparse payload in index
    // order; *rest gets the others. What a sender streaming its entries
    // largest first has delivered when it is cut off after m.
    SparseGradient takeLargest(std::int64_t m, SparseGradient *rest) const;
};

namespace sparse_codec {
inline constexpr std::int32_t kMagic = 0x444c5350;  // "DLSP"
inline constexpr std::int64_t kHeaderInts = 4;

torch::Tensor encode(const SparseGradient &g);
// Throws EngineError on a payload that is malformed or not finite.
SparseGradient decode(const torch::Tensor &wire);
// decode() for a receiver whose vector has `length` entries: a payload
// sized for another model is refused too.
SparseGradient decodeFor(const torch::Tensor &wire, std::int64_t length);
} // namespace sparse_codec

} // namespace dlion::engine
