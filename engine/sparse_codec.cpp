#include "sparse_codec.h"

#include <algorithm>

#include "engine_error.h"

#include <cmath>
#include <cstring>

namespace dlion::engine {

std::int64_t SparseGradient::wireBytes() const
{
    return (sparse_codec::kHeaderInts + (dense() ? 0 : indices.numel()) + values.numel()) * 4;
}

void SparseGradient::addTo(torch::Tensor &target, double scale) const
{
    if (dense())
        target.narrow(0, offset, values.numel()).add_(values, scale);
    else
        target.index_add_(0, indices, values * scale);
}

SparseGradient SparseGradient::takeLargest(std::int64_t m, SparseGradient *rest) const
{
    const std::int64_t count = values.numel();
    const torch::Tensor index = dense() ? torch::arange(offset, offset + count, torch::kLong) : indices;
    m = std::clamp<std::int64_t>(m, 0, count);
    const torch::Tensor chosen = std::get<0>(std::get<1>(values.abs().topk(m)).sort());
    auto keep = torch::zeros({count}, torch::kBool);
    keep.index_fill_(0, chosen, true);
    SparseGradient kept, others;
    kept.length = others.length = length;
    kept.indices = index.index_select(0, chosen);
    kept.values = values.index_select(0, chosen);
    others.indices = index.masked_select(keep.logical_not());
    others.values = values.masked_select(keep.logical_not());
    if (rest)
        *rest = std::move(others);
    return kept;
}

namespace sparse_codec {

torch::Tensor encode(const SparseGradient &g)
{
    const std::int64_t count = g.values.numel();
    const std::int64_t idxCount = g.dense() ? 0 : count;
    auto wire = torch::empty({kHeaderInts + idxCount + count}, torch::kInt);
    auto *p = wire.data_ptr<std::int32_t>();
    p[0] = kMagic;
    p[1] = std::int32_t(count);
    p[2] = std::int32_t(g.length);
    p[3] = std::int32_t(g.offset);
    if (idxCount) {
        const auto idx = g.indices.to(torch::kInt).contiguous();
        std::memcpy(p + kHeaderInts, idx.data_ptr<std::int32_t>(), std::size_t(idxCount) * 4);
    }
    const auto vals = g.values.to(torch::kFloat).contiguous();
    std::memcpy(p + kHeaderInts + idxCount, vals.data_ptr<float>(), std::size_t(count) * 4);
    return wire;
}

SparseGradient decode(const torch::Tensor &wire)
{
    if (wire.scalar_type() != torch::kInt || wire.dim() != 1 || wire.numel() < kHeaderInts)
        throw EngineError("received a malformed gradient payload (too short)");
    const auto *p = wire.data_ptr<std::int32_t>();
    const std::int64_t count = p[1], length = p[2], offset = p[3];
    if (p[0] != kMagic || count < 0 || length < 0 || offset < 0 || count > length)
        throw EngineError("received a malformed gradient payload (bad header)");
    const bool dense = wire.numel() == kHeaderInts + count;
    const std::int64_t idxCount = dense ? 0 : count;
    if (wire.numel() != kHeaderInts + idxCount + count || (!dense && offset != 0))
        throw EngineError("received a malformed gradient payload (size does not match its header)");
    SparseGradient g;
    g.length = length;
    g.offset = offset;
    // A view: a receiver never reuses a payload it handed over, and no
    // caller writes into what it decoded.
    g.values = wire.narrow(0, kHeaderInts + idxCount, count).view(torch::kFloat);
    // One NaN would spread through every replica that applies it. A finite
    // sum holds no NaN or Inf: one pass and no mask, where most payloads
    // are whole gradients; a sum that overflowed is checked entry by entry.
    if (!std::isfinite(g.values.sum().item<float>()) && !g.values.isfinite().all().item<bool>())
        throw EngineError("received a gradient payload with non-finite values (NaN or Inf); it is not applied");
    if (!dense) {
        g.indices = wire.narrow(0, kHeaderInts, count).to(torch::kLong);
        if (count && (g.indices.min().item<std::int64_t>() < 0 || g.indices.max().item<std::int64_t>() >= length))
            throw EngineError("received a malformed gradient payload (index out of range)");
    } else if (offset + count > length) {
        throw EngineError("received a malformed gradient payload (slice out of range)");
    }
    return g;
}

SparseGradient decodeFor(const torch::Tensor &wire, std::int64_t length)
{
    SparseGradient g = decode(wire);
    if (g.length != length)
        throw EngineError("received a gradient payload for " + std::to_string(g.length) + " parameters; this model has "
                          + std::to_string(length));
    return g;
}

} // namespace sparse_codec

} // namespace dlion::engine
