#include "max_pool.h"

#include <ATen/Parallel.h>
#include <torch/autograd.h>
#include <torch/nn/functional/pooling.h>

#include <bit>
#include <cstdint>

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
            for (std::int64_t p = begin; p < end; ++p) {
                for (std::int64_t i = 0; i < oh; ++i) {
                    const float *top = in + (p * h + 2 * i) * w, *bottom = top + w;
                    float *orow = o + (p * oh + i) * ow;
                    std::uint8_t *krow = k + (p * oh + i) * ow;
                    for (std::int64_t j = 0; j < ow; ++j) {
                        // Pairwise, earlier entries first: the same winner
                        // as torch's scan in row order.
                        const float a = top[2 * j], b = top[2 * j + 1], c = bottom[2 * j], d = bottom[2 * j + 1];
                        const bool ab = replaces(b, a), cd = replaces(d, c);
                        const float upper = pick(ab, b, a), lower = pick(cd, d, c);
                        const bool down = replaces(lower, upper);
                        orow[j] = pick(down, lower, upper);
                        krow[j] = std::uint8_t(int(down) * (2 + int(cd)) + int(!down) * int(ab));
                    }
                }
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
            for (std::int64_t p = begin; p < end; ++p) {
                for (std::int64_t i = 0; i < oh; ++i) {
                    float *top = gi + (p * h + 2 * i) * w, *bottom = top + w;
                    const float *grow = go + (p * oh + i) * ow;
                    const std::uint8_t *krow = k + (p * oh + i) * ow;
                    for (std::int64_t j = 0; j < ow; ++j) {
                        // torch adds the gradient into zeros: + 0 makes a
                        // -0 gradient +0 as there.
                        const float v = grow[j] + 0.f;
                        const int at = krow[j];
                        top[2 * j] = pick(at == 0, v, 0.f);
                        top[2 * j + 1] = pick(at == 1, v, 0.f);
                        bottom[2 * j] = pick(at == 2, v, 0.f);
                        bottom[2 * j + 1] = pick(at == 3, v, 0.f);
                    }
                }
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
