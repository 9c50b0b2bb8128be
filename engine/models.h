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
    // The model as a file Python loads: a built-in model's state_dict
    // (torch.load), a TorchScript model's module (torch.jit.load). Detaches
    // the parameters and buffers from the trainer's flat buffers, so call
    // it only when training is over (script_model.cpp).
    virtual std::string serialized();
    // "state_dict" or "torchscript": what serialized() writes.
    virtual std::string format() const { return "state_dict"; }
};

// Whether `name` names a TorchScript file rather than a built-in model.
bool isModelFile(const std::string &name);

// "mlp" (784-256-128-10 style), "lenet5" (LeCun et al. 1998, ReLU and max
// pooling), "cnn" (six 3x3 conv layers with batch norm, for CIFAR-size
// input), or a TorchScript file (*.pt, see loadScriptModel). Throws
// EngineError on an unknown name.
std::shared_ptr<Model> makeModel(const std::string &name, int channels, int height, int width, int classes);

// A module saved from Python with torch.jit.script or torch.jit.trace.
// Throws EngineError naming `path` when it is no TorchScript module, has
// no parameters, or does not map (N, channels, height, width) to
// (N, classes).
std::shared_ptr<Model> loadScriptModel(const std::string &path, int channels, int height, int width, int classes);

} // namespace dlion::engine
