#include "max_pool.h"

#include <ATen/Parallel.h>
#include <torch/autograd.h>
#include <torch/nn/functional/pooling.h>

#include <bit>
#include <cstdint>
#include <cstring>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

namespace dlion::engine {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Whether `v` takes the place of `best` in torch's scan of a window.
inline bool replaces(float v, float best)
{
    return (v > best) | (v != v);
}

// `take ? a : b` by masks: a compiler turns the conditional into a branch,
// which random winners mispredict half the time.
inline float pick(bool take, float a, float b)
{
    const std::uint32_t mask = 0u - std::uint32_t(take);
    return std::bit_cast<float>((std::bit_cast<std::uint32_t>(a) & mask) | (std::bit_cast<std::uint32_t>(b) & ~mask));
}

// Windows [from, to) of one row of outputs: pairwise, earlier entries
// first, which picks the same winner as torch's scan in row order.
void poolTail(const float *top, const float *bottom, float *out, std::uint8_t *where, std::int64_t from, std::int64_t to)
{
    for (std::int64_t j = from; j < to; ++j) {
        const float a = top[2 * j], b = top[2 * j + 1], c = bottom[2 * j], d = bottom[2 * j + 1];
        const bool ab = replaces(b, a), cd = replaces(d, c);
        const float upper = pick(ab, b, a), lower = pick(cd, d, c);
        const bool down = replaces(lower, upper);
        out[j] = pick(down, lower, upper);
        where[j] = std::uint8_t(int(down) * (2 + int(cd)) + int(!down) * int(ab));
    }
}

// The gradient of windows [from, to) of one row into their inputs.
void unpoolTail(float *top, float *bottom, const float *grad, const std::uint8_t *where, std::int64_t from,
                std::int64_t to)
{
    for (std::int64_t j = from; j < to; ++j) {
        // torch adds the gradient into zeros: + 0 makes a -0 gradient +0
        // as there.
        const float v = grad[j] + 0.f;
        const int at = where[j];
        top[2 * j] = pick(at == 0, v, 0.f);
        top[2 * j + 1] = pick(at == 1, v, 0.f);
        bottom[2 * j] = pick(at == 2, v, 0.f);
        bottom[2 * j + 1] = pick(at == 3, v, 0.f);
    }
}

#ifdef __SSE2__
// The same rules four windows at a time (SSE2 is in every x86-64 CPU).
inline __m128 replacesPs(__m128 v, __m128 best)
{
    return _mm_or_ps(_mm_cmpgt_ps(v, best), _mm_cmpunord_ps(v, v));
}

inline __m128 pickPs(__m128 take, __m128 a, __m128 b)
{
    return _mm_or_ps(_mm_and_ps(take, a), _mm_andnot_ps(take, b));
}

std::int64_t poolRow(const float *top, const float *bottom, float *out, std::uint8_t *where, std::int64_t ow)
{
    std::int64_t j = 0;
    for (; j + 4 <= ow; j += 4) {
        const __m128 t0 = _mm_loadu_ps(top + 2 * j), t1 = _mm_loadu_ps(top + 2 * j + 4);
        const __m128 b0 = _mm_loadu_ps(bottom + 2 * j), b1 = _mm_loadu_ps(bottom + 2 * j + 4);
        const __m128 a = _mm_shuffle_ps(t0, t1, _MM_SHUFFLE(2, 0, 2, 0)), b = _mm_shuffle_ps(t0, t1, _MM_SHUFFLE(3, 1, 3, 1));
        const __m128 c = _mm_shuffle_ps(b0, b1, _MM_SHUFFLE(2, 0, 2, 0)), d = _mm_shuffle_ps(b0, b1, _MM_SHUFFLE(3, 1, 3, 1));
        const __m128 ab = replacesPs(b, a), cd = replacesPs(d, c);
        const __m128 upper = pickPs(ab, b, a), lower = pickPs(cd, d, c);
        const __m128 down = replacesPs(lower, upper);
        _mm_storeu_ps(out + j, pickPs(down, lower, upper));
        // Masks are all ones: shifted down they are 0 or 1.
        const __m128i abBit = _mm_srli_epi32(_mm_castps_si128(ab), 31);
        const __m128i lowerAt = _mm_add_epi32(_mm_srli_epi32(_mm_castps_si128(cd), 31), _mm_set1_epi32(2));
        const __m128i downMask = _mm_castps_si128(down);
        const __m128i at = _mm_or_si128(_mm_and_si128(downMask, lowerAt), _mm_andnot_si128(downMask, abBit));
        const __m128i bytes = _mm_packus_epi16(_mm_packs_epi32(at, at), _mm_setzero_si128());
        const std::uint32_t four = std::uint32_t(_mm_cvtsi128_si32(bytes));
        std::memcpy(where + j, &four, 4);
    }
    return j;
}

std::int64_t unpoolRow(float *top, float *bottom, const float *grad, const std::uint8_t *where, std::int64_t ow)
{
    std::int64_t j = 0;
    const __m128 zero = _mm_setzero_ps();
    for (; j + 4 <= ow; j += 4) {
        const __m128 v = _mm_add_ps(_mm_loadu_ps(grad + j), zero);
        std::uint32_t four = 0;
        std::memcpy(&four, where + j, 4);
        const __m128i bytes = _mm_cvtsi32_si128(int(four));
        const __m128i at = _mm_unpacklo_epi16(_mm_unpacklo_epi8(bytes, _mm_setzero_si128()), _mm_setzero_si128());
        const auto onlyAt = [&](int k) { return _mm_and_ps(_mm_castsi128_ps(_mm_cmpeq_epi32(at, _mm_set1_epi32(k))), v); };
        const __m128 a = onlyAt(0), b = onlyAt(1), c = onlyAt(2), d = onlyAt(3);
        _mm_storeu_ps(top + 2 * j, _mm_unpacklo_ps(a, b));
        _mm_storeu_ps(top + 2 * j + 4, _mm_unpackhi_ps(a, b));
        _mm_storeu_ps(bottom + 2 * j, _mm_unpacklo_ps(c, d));
        _mm_storeu_ps(bottom + 2 * j + 4, _mm_unpackhi_ps(c, d));
    }
    return j;
}
#else
std::int64_t poolRow(const float *, const float *, float *, std::uint8_t *, std::int64_t) { return 0; }
std::int64_t unpoolRow(float *, float *, const float *, const std::uint8_t *, std::int64_t) { return 0; }
#endif

// Planes per parallel task: a LeNet-5 plane is a few hundred outputs.
constexpr std::int64_t kGrain = 16;

struct MaxPool2x2Function : torch::autograd::Function<MaxPool2x2Function> {
    static torch::Tensor forward(AutogradContext *ctx, const torch::Tensor &input)
    {
        const torch::Tensor x = input.contiguous();
        const std::int64_t planes = x.size(0) * x.size(1), h = x.size(2), w = x.size(3);
        const std::int64_t oh = h / 2, ow = w / 2;
        auto out = torch::empty({x.size(0), x.size(1), oh, ow}, x.options());
        // The winner's place in its window, row by row: 0..3.
        auto where = torch::empty({x.size(0), x.size(1), oh, ow}, x.options().dtype(torch::kByte));
        const float *in = x.data_ptr<float>();
        float *o = out.data_ptr<float>();
        std::uint8_t *k = where.data_ptr<std::uint8_t>();
        at::parallel_for(0, planes, kGrain, [&](std::int64_t begin, std::int64_t end) {
            for (std::int64_t row = begin * oh; row < end * oh; ++row) {
                const float *top = in + (row / oh * h + 2 * (row % oh)) * w, *bottom = top + w;
                float *orow = o + row * ow;
                std::uint8_t *krow = k + row * ow;
                poolTail(top, bottom, orow, krow, poolRow(top, bottom, orow, krow, ow), ow);
            }
        });
        ctx->save_for_backward({where});
        ctx->saved_data["h"] = h;
        ctx->saved_data["w"] = w;
        return out;
    }

    static variable_list backward(AutogradContext *ctx, variable_list grads)
    {
        const torch::Tensor where = ctx->get_saved_variables()[0];
        const std::int64_t h = ctx->saved_data["h"].toInt(), w = ctx->saved_data["w"].toInt();
        const torch::Tensor g = grads[0].contiguous();
        const std::int64_t planes = g.size(0) * g.size(1), oh = g.size(2), ow = g.size(3);
        // Odd edges get no gradient; every other entry is written below.
        auto gin = (h % 2 || w % 2) ? torch::zeros({g.size(0), g.size(1), h, w}, g.options())
                                    : torch::empty({g.size(0), g.size(1), h, w}, g.options());
        const float *go = g.data_ptr<float>();
        const std::uint8_t *k = where.data_ptr<std::uint8_t>();
        float *gi = gin.data_ptr<float>();
        at::parallel_for(0, planes, kGrain, [&](std::int64_t begin, std::int64_t end) {
            for (std::int64_t row = begin * oh; row < end * oh; ++row) {
                float *top = gi + (row / oh * h + 2 * (row % oh)) * w, *bottom = top + w;
                const float *grow = go + row * ow;
                const std::uint8_t *krow = k + row * ow;
                unpoolTail(top, bottom, grow, krow, unpoolRow(top, bottom, grow, krow, ow), ow);
            }
        });
        return {gin};
    }
};

} // namespace

torch::Tensor maxPool2x2(const torch::Tensor &x)
{
    if (x.dim() != 4 || x.scalar_type() != torch::kFloat || !x.device().is_cpu() || x.size(2) < 2 || x.size(3) < 2)
        return torch::nn::functional::max_pool2d(x, torch::nn::functional::MaxPool2dFuncOptions(2));
    return MaxPool2x2Function::apply(x);
}

} // namespace dlion::engine
