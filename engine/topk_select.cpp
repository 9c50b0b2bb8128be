#include "topk_select.h"

#include <algorithm>
#include <bit>
#include <functional>
#include <stdexcept>
#include <vector>

namespace dlion::engine::topk {

namespace {
std::uint32_t magnitudeBits(float v)
{
    return std::bit_cast<std::uint32_t>(v) & 0x7fffffffu;
}
} // namespace

void select(const float *acc, std::int64_t n, std::int64_t k, std::int64_t *indices, float *values)
{
    if (n < 0 || n > std::int64_t(0xffffffffu))
        throw std::invalid_argument("topk::select: length out of range");
    k = std::clamp<std::int64_t>(k, 0, n);
    if (k == 0)
        return;
    // The k-th best magnitude is the threshold: every entry above it is sent,
    // and of those equal to it only the lowest indices, which a scan in index
    // order takes first. A histogram of the top magnitude bits finds the
    // bucket that holds the threshold; only that bucket is partially sorted.
    constexpr int kShift = 16;
    std::vector<std::uint32_t> histogram(std::size_t(1) << (31 - kShift));
    for (std::int64_t i = 0; i < n; ++i)
        ++histogram[magnitudeBits(acc[i]) >> kShift];
    std::size_t bucket = histogram.size();
    std::int64_t above = 0;  // entries in the buckets above `bucket`
    while (above + histogram[--bucket] < k)
        above += histogram[bucket];
    std::vector<std::uint32_t> candidates;
    candidates.reserve(histogram[bucket]);
    for (std::int64_t i = 0; i < n; ++i) {
        const std::uint32_t m = magnitudeBits(acc[i]);
        if (m >> kShift == bucket)
            candidates.push_back(m);
    }
    const auto nth = candidates.begin() + (k - above - 1);
    std::nth_element(candidates.begin(), nth, candidates.end(), std::greater<>());
    const std::uint32_t threshold = *nth;
    std::int64_t ties =
        k - above - std::count_if(candidates.begin(), nth, [threshold](std::uint32_t m) { return m > threshold; });
    std::int64_t out = 0;
    for (std::int64_t i = 0; i < n && out < k; ++i) {
        const std::uint32_t m = magnitudeBits(acc[i]);
        if (m > threshold || (m == threshold && ties-- > 0)) {
            indices[out] = i;
            values[out] = acc[i];
            ++out;
        }
    }
}

} // namespace dlion::engine::topk
