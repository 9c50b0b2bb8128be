// TorchScript in and out: the one file that includes the TorchScript
// serialization headers (they cost seconds of compile time per includer).
#include "models.h"

#include "engine_error.h"

#include <torch/csrc/jit/serialization/import.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <QFileInfo>

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

// A torch::jit::Module behind the Model interface. Its parameters and
// buffers are registered here under their index, as the same tensors, so
// the trainer's flat views reach the scripted module.
class ScriptModel : public Model {
public:
    explicit ScriptModel(torch::jit::Module module) : m_module(std::move(module))
    {
        int i = 0;
        for (const auto &p : m_module.named_parameters())
            register_parameter("p" + std::to_string(i++), p.value);
        i = 0;
        for (const auto &b : m_module.named_buffers())
            register_buffer("b" + std::to_string(i++), b.value);
    }
    torch::Tensor forward(torch::Tensor x) override { return m_module.forward({x}).toTensor(); }
    void train(bool on) override
    {
        Model::train(on);
        m_module.train(on);
    }
    std::string serialized() override
    {
        ownStorage(*this);
        std::ostringstream out;
        m_module.save(out);
        return out.str();
    }
    std::string format() const override { return "torchscript"; }

private:
    torch::jit::Module m_module;
};

} // namespace

std::string Model::serialized()
{
    ownStorage(*this);
    c10::Dict<std::string, torch::Tensor> state;
    for (const auto &p : named_parameters())
        state.insert(p.key(), p.value());
    for (const auto &b : named_buffers())
        state.insert(b.key(), b.value());
    const std::vector<char> bytes = torch::jit::pickle_save(state);
    return {bytes.begin(), bytes.end()};
}

std::shared_ptr<Model> loadScriptModel(const std::string &path, int channels, int height, int width, int classes)
{
    auto fail = [&](const std::string &why) { return EngineError("model " + path + ": " + why); };
    if (!QFileInfo(QString::fromStdString(path)).isFile())
        throw fail("no such file (give a module saved from Python with torch.jit.script(model).save(PATH))");
    std::shared_ptr<Model> model;
    try {
        model = std::make_shared<ScriptModel>(torch::jit::load(path, torch::kCPU));
    } catch (const std::exception &e) {
        throw fail("not a TorchScript module (" + reason(e)
                   + "); save one from Python with torch.jit.script(model).save(PATH)");
    }
    if (model->parameters().empty())
        throw fail("the module has no parameters to train");
    const std::string input = "(2, " + std::to_string(channels) + ", " + std::to_string(height) + ", "
        + std::to_string(width) + ")";
    torch::Tensor out;
    try {
        torch::NoGradGuard noGrad;
        model->eval();
        out = model->forward(torch::zeros({2, channels, height, width}));
        model->train();
    } catch (const std::exception &e) {
        throw fail("does not take the dataset's input of shape " + input + ": " + reason(e));
    }
    if (out.dim() != 2 || out.size(0) != 2 || out.size(1) != classes)
        throw fail("maps input " + input + " to shape " + c10::str(out.sizes()) + "; the dataset needs (2, "
                   + std::to_string(classes) + "): one logit per class");
    return model;
}

} // namespace dlion::engine
