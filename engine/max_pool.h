#pragma once

#include <torch/types.h>

namespace dlion::engine {

// torch::max_pool2d(x, 2): 2x2 windows, stride 2, odd edges dropped, the
// same output and gradient bit for bit (the first largest entry of a
// window wins, a NaN wins over any number, the last NaN over an earlier
// one). LibTorch 1.13's CPU kernel scans each window with a branch per
// entry: forward and backward of LeNet-5's two poolings at batch 32 took
// 0.61-0.67 and 0.14-0.16 ms of a step of about 2.2 ms. Here the winner is
// selected by masks, four windows at a time on SSE2: 0.08 and 0.04 ms, and
// one worker trains LeNet-5 1.24-1.28x as fast (docs/benchmarks.md).
// Float NCHW tensors only; anything else goes to torch::max_pool2d.
torch::Tensor maxPool2x2(const torch::Tensor &x);

} // namespace dlion::engine
