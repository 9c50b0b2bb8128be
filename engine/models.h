#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <memory>
#include <string>

namespace dlion::engine {

// A classifier: images (N, C, H, W) -> logits (N, classes).
class Model : public torch::nn::Module {
public:
    virtual torch::Tensor forward(torch::Tensor x) = 0;
};

// "mlp" (784-256-128-10 style), "lenet5" (LeCun et al. 1998, ReLU and max
// pooling) or "cnn" (six 3x3 conv layers with batch norm, for CIFAR-size
// input). Throws EngineError on an unknown name.
std::shared_ptr<Model> makeModel(const std::string &name, int channels, int height, int width, int classes);

} // namespace dlion::engine
