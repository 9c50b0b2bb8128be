#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dlion::engine {

// A classifier: samples (N, sampleShape...) -> logits (N, classes).
class Model : public torch::nn::Module {
public:
    virtual torch::Tensor forward(torch::Tensor x) = 0;
    // The model as a TorchScript module with its current parameters and
    // buffers, the file Python loads with torch.jit.load; a built-in model
    // is translated into one (script_model.cpp). Detaches a TorchScript
    // model's tensors from the trainer's flat buffers, so call it only when
    // training is over.
    virtual std::string torchScript();
    // A built-in model's state_dict (torch.load), its keys those of
    // named_parameters() and named_buffers(); empty for a TorchScript model,
    // whose module is all there is.
    virtual std::string stateDict();
    // A built-in model's forward() as TorchScript source over submodules
    // named as its own (torchScript() registers them).
    virtual std::string scriptForward() const { return {}; }
};

// Whether `name` names a TorchScript file rather than a built-in model.
bool isModelFile(const std::string &name);

// The shape one sample reaches a model in: (features) for tabular data
// (one channel, one row), (channels, height, width) for images.
std::vector<std::int64_t> sampleShape(int channels, int height, int width);

// "mlp" (784-256-128-10 style), "lenet5" (LeCun et al. 1998, ReLU and max
// pooling), "cnn" (six 3x3 conv layers with batch norm, for CIFAR-size
// input), or a TorchScript file (*.pt, see loadScriptModel). Throws
// EngineError on an unknown name.
std::shared_ptr<Model> makeModel(const std::string &name, int channels, int height, int width, int classes);

// A module saved from Python with torch.jit.script or torch.jit.trace. It
// receives batches of shape (N, sample...) (see sampleShape). Throws
// EngineError naming `path` when it is no TorchScript module, has no
// parameters, or does not map (N, sample...) to (N, classes).
std::shared_ptr<Model> loadScriptModel(const std::string &path, const std::vector<std::int64_t> &sample, int classes);

} // namespace dlion::engine
