// TorchScript in and out: the one file that includes the TorchScript
// serialization headers (they cost seconds of compile time per includer).
#include "models.h"

#include "engine_error.h"

#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/serialization/import.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include <QFileInfo>

#include <iomanip>
#include <sstream>

namespace dlion::engine {

namespace {

// The line of a torch error that says what went wrong: the TorchScript
// interpreter's message ends with it ("RuntimeError: ..."), others start with it.
std::string reason(const std::exception &e)
{
    const std::string s = e.what();
    const auto at = s.rfind("Error: ");
    if (s.rfind("The following operation failed", 0) != 0 || at == std::string::npos)
        return s.substr(0, s.find('\n'));
    const auto start = s.rfind('\n', at) + 1;  // npos + 1 == 0: the first line
    return s.substr(start, s.find('\n', at) - start);
}

// Gives every parameter and buffer its own storage (they are views into
// the trainer's flat buffers, which a file would otherwise hold whole).
void ownStorage(torch::nn::Module &m)
{
    torch::NoGradGuard noGrad;
    for (auto &t : m.parameters())
        t.set_data(t.detach().clone());
    for (auto &t : m.buffers())
        t.set_data(t.clone());
}

// "[a, b]": an int[] in TorchScript source.
std::string list(const torch::ExpandingArray<2> &a)
{
    return "[" + std::to_string(a->at(0)) + ", " + std::to_string(a->at(1)) + "]";
}

// The TorchScript forward of a layer of the built-in models, doing what
// LibTorch's module does; empty for a container (the model's forward
// calls into its layers).
std::string layerForward(const torch::nn::Module &layer)
{
    // A layer without a bias has no such attribute: None stands in.
    auto bias = [](bool has) { return std::string(has ? "self.bias" : "None"); };
    if (const auto *linear = dynamic_cast<const torch::nn::LinearImpl *>(&layer))
        return "def forward(self, x):\n    return torch.linear(x, self.weight, " + bias(linear->options.bias()) + ")\n";
    if (const auto *conv = dynamic_cast<const torch::nn::Conv2dImpl *>(&layer)) {
        const auto &o = conv->options;
        const auto *padding = c10::get_if<torch::ExpandingArray<2>>(&o.padding());
        if (!padding || !c10::get_if<torch::enumtype::kZeros>(&o.padding_mode()))
            throw EngineError("a Conv2d layer pads in a way the TorchScript export does not translate");
        return "def forward(self, x):\n    return torch.conv2d(x, self.weight, " + bias(o.bias()) + ", " + list(o.stride())
            + ", " + list(*padding) + ", " + list(o.dilation()) + ", " + std::to_string(o.groups()) + ")\n";
    }
    if (const auto *bn = dynamic_cast<const torch::nn::BatchNorm2dImpl *>(&layer)) {
        const auto &o = bn->options;
        if (!o.affine() || !o.track_running_stats() || !o.momentum())
            throw EngineError("a BatchNorm2d layer without affine parameters, running statistics or momentum has no "
                              "TorchScript translation");
        std::ostringstream s;
        s << std::setprecision(17) << "def forward(self, x):\n"
          << "    if self.training:\n"
          << "        self.num_batches_tracked.add_(1)\n"
          << "    return torch.batch_norm(x, self.weight, self.bias, self.running_mean, self.running_var, "
             "self.training, "
          << *o.momentum() << ", " << o.eps() << ", True)\n";
        return s.str();
    }
    return {};
}

// "Linear" for torch::nn::LinearImpl, "Cnn" for a built-in model.
std::string className(const torch::nn::Module &m)
{
    std::string name = m.name().substr(m.name().rfind(':') + 1);
    if (name.size() > 4 && name.compare(name.size() - 4, 4, "Impl") == 0)
        name.resize(name.size() - 4);
    return name;
}

// `m`, a built-in model or one of its layers, as a TorchScript module with
// copies of its parameters and buffers under the same names, so that
// Python's state_dict() of it has the built-in model's keys. Layers without
// tensors (ReLU, pooling) are left out: the forward source does their work.
torch::jit::Module translate(const torch::nn::Module &m, const std::string &forward,
                             const std::shared_ptr<torch::jit::CompilationUnit> &unit)
{
    torch::jit::Module s(c10::QualifiedName("__torch__.dlion." + className(m)), unit, /*shouldMangle=*/true);
    s.register_attribute("training", c10::BoolType::get(), m.is_training());
    for (const auto &p : m.named_parameters(false))
        s.register_parameter(p.key(), p.value().detach().clone().requires_grad_(), false);
    for (const auto &b : m.named_buffers(false))
        s.register_buffer(b.key(), b.value().clone());
    for (const auto &c : m.named_children()) {
        if (!c.value()->parameters().empty() || !c.value()->buffers().empty())
            s.register_module(c.key(), translate(*c.value(), layerForward(*c.value()), unit));
    }
    if (!forward.empty())
        s.define(forward);
    return s;
}

// A torch::jit::Module behind the Model interface. Its parameters and
// buffers are registered here under their index, as the same tensors, so
// the trainer's flat views reach the scripted module. Batches reach the
// module as (N, sample...).
class ScriptModel : public Model {
public:
    ScriptModel(torch::jit::Module module, std::vector<std::int64_t> sample)
        : m_module(std::move(module)), m_sample(std::move(sample))
    {
        int i = 0;
        for (const auto &p : m_module.named_parameters())
            register_parameter("p" + std::to_string(i++), p.value);
        i = 0;
        for (const auto &b : m_module.named_buffers())
            register_buffer("b" + std::to_string(i++), b.value);
    }
    torch::Tensor forward(torch::Tensor x) override
    {
        std::vector<std::int64_t> shape{x.size(0)};
        shape.insert(shape.end(), m_sample.begin(), m_sample.end());
        return m_module.forward({x.reshape(shape)}).toTensor();
    }
    void train(bool on) override
    {
        Model::train(on);
        m_module.train(on);
    }
    std::string torchScript() override
    {
        ownStorage(*this);
        std::ostringstream out;
        m_module.save(out);
        return out.str();
    }
    std::string stateDict() override { return {}; }

private:
    torch::jit::Module m_module;
    std::vector<std::int64_t> m_sample;
};

} // namespace

std::string Model::torchScript()
{
    torch::NoGradGuard noGrad;
    std::ostringstream out;
    translate(*this, scriptForward(), std::make_shared<torch::jit::CompilationUnit>()).save(out);
    return out.str();
}

std::string Model::stateDict()
{
    torch::NoGradGuard noGrad;
    c10::Dict<std::string, torch::Tensor> state;
    for (const auto &p : named_parameters())
        state.insert(p.key(), p.value().detach().clone());
    for (const auto &b : named_buffers())
        state.insert(b.key(), b.value().clone());
    const std::vector<char> bytes = torch::jit::pickle_save(state);
    return {bytes.begin(), bytes.end()};
}

std::shared_ptr<Model> loadScriptModel(const std::string &path, const std::vector<std::int64_t> &sample, int classes)
{
    auto fail = [&](const std::string &why) { return EngineError("model " + path + ": " + why); };
    if (!QFileInfo(QString::fromStdString(path)).isFile())
        throw fail("no such file (give a module saved from Python with torch.jit.script(model).save(PATH))");
    std::shared_ptr<Model> model;
    try {
        model = std::make_shared<ScriptModel>(torch::jit::load(path, torch::kCPU), sample);
    } catch (const std::exception &e) {
        throw fail("not a TorchScript module (" + reason(e)
                   + "); save one from Python with torch.jit.script(model).save(PATH)");
    }
    if (model->parameters().empty())
        throw fail("the module has no parameters to train");
    std::vector<std::int64_t> shape{2};
    std::string input = "(2";
    for (std::int64_t d : sample) {
        shape.push_back(d);
        input += ", " + std::to_string(d);
    }
    input += ")";
    torch::Tensor out;
    try {
        torch::NoGradGuard noGrad;
        model->eval();
        out = model->forward(torch::zeros(shape));
        model->train();
    } catch (const std::exception &e) {
        throw fail("does not take the dataset's input of shape " + input
                   + (sample.size() == 1 ? " (tabular data: a row of float features per sample)" : "") + ": " + reason(e));
    }
    if (out.dim() != 2 || out.size(0) != 2 || out.size(1) != classes)
        throw fail("maps input " + input + " to shape " + c10::str(out.sizes()) + "; the dataset needs (2, "
                   + std::to_string(classes) + "): one logit per class");
    return model;
}

} // namespace dlion::engine
