#include "models.h"

#include "engine_error.h"
#include "max_pool.h"

#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/functional.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

namespace dlion::engine {

namespace {

class Mlp : public Model {
public:
    Mlp(int inputs, int classes)
        : m_fc1(register_module("fc1", torch::nn::Linear(inputs, 256))),
          m_fc2(register_module("fc2", torch::nn::Linear(256, 128))),
          m_fc3(register_module("fc3", torch::nn::Linear(128, classes)))
    {}
    torch::Tensor forward(torch::Tensor x) override
    {
        x = x.flatten(1);
        x = torch::relu(m_fc1(x));
        x = torch::relu(m_fc2(x));
        return m_fc3(x);
    }
    std::string scriptForward() const override
    {
        return "def forward(self, x):\n"
               "    x = x.flatten(1)\n"
               "    x = torch.relu(self.fc1.forward(x))\n"
               "    x = torch.relu(self.fc2.forward(x))\n"
               "    return self.fc3.forward(x)\n";
    }

private:
    torch::nn::Linear m_fc1, m_fc2, m_fc3;
};

class LeNet5 : public Model {
public:
    LeNet5(int channels, int height, int width, int classes)
        : m_conv1(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(channels, 6, 5).padding(height < 32 ? 2 : 0)))),
          m_conv2(register_module("conv2", torch::nn::Conv2d(6, 16, 5)))
    {
        const int flat = int(features(torch::zeros({1, channels, height, width})).numel());
        m_fc1 = register_module("fc1", torch::nn::Linear(flat, 120));
        m_fc2 = register_module("fc2", torch::nn::Linear(120, 84));
        m_fc3 = register_module("fc3", torch::nn::Linear(84, classes));
    }
    torch::Tensor forward(torch::Tensor x) override
    {
        x = features(x).flatten(1);
        x = torch::relu(m_fc1(x));
        x = torch::relu(m_fc2(x));
        return m_fc3(x);
    }
    std::string scriptForward() const override
    {
        return "def forward(self, x):\n"
               "    x = torch.max_pool2d(torch.relu(self.conv1.forward(x)), [2, 2])\n"
               "    x = torch.max_pool2d(torch.relu(self.conv2.forward(x)), [2, 2])\n"
               "    x = torch.relu(self.fc1.forward(x.flatten(1)))\n"
               "    x = torch.relu(self.fc2.forward(x))\n"
               "    return self.fc3.forward(x)\n";
    }

private:
    torch::Tensor features(torch::Tensor x)
    {
        x = maxPool2x2(torch::relu(m_conv1(x)));
        return maxPool2x2(torch::relu(m_conv2(x)));
    }

    torch::nn::Conv2d m_conv1, m_conv2;
    torch::nn::Linear m_fc1{nullptr}, m_fc2{nullptr}, m_fc3{nullptr};
};

// Layer `i` of Cnn's body in its TorchScript forward.
std::string bodyLayer(std::size_t i)
{
    return "getattr(self.body, \"" + std::to_string(i) + "\")";
}

class Cnn : public Model {
public:
    Cnn(int channels, int height, int width, int classes)
    {
        int in = channels;
        for (int out : {32, 64, 128}) {
            for (int rep = 0; rep < 2; ++rep) {
                const std::size_t conv = m_body->size();
                m_body->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 3).padding(1).bias(false)));
                m_body->push_back(torch::nn::BatchNorm2d(out));
                m_body->push_back(torch::nn::Functional(torch::relu));
                m_script += "    x = torch.relu(" + bodyLayer(conv + 1) + ".forward(" + bodyLayer(conv) + ".forward(x)))\n";
                in = out;
            }
            m_body->push_back(torch::nn::Functional([](const torch::Tensor &t) { return maxPool2x2(t); }));
            m_script += "    x = torch.max_pool2d(x, [2, 2])\n";
        }
        register_module("body", m_body);
        const int flat = int(m_body->forward(torch::zeros({2, channels, height, width})).numel() / 2);
        m_fc1 = register_module("fc1", torch::nn::Linear(flat, 256));
        m_fc2 = register_module("fc2", torch::nn::Linear(256, classes));
    }
    torch::Tensor forward(torch::Tensor x) override
    {
        x = m_body->forward(x).flatten(1);
        return m_fc2(torch::relu(m_fc1(x)));
    }
    std::string scriptForward() const override
    {
        return "def forward(self, x):\n" + m_script + "    return self.fc2.forward(torch.relu(self.fc1.forward(x.flatten(1))))\n";
    }

private:
    torch::nn::Sequential m_body;
    std::string m_script;  // the body's part of scriptForward(), built with it
    torch::nn::Linear m_fc1{nullptr}, m_fc2{nullptr};
};

} // namespace

bool isModelFile(const std::string &name)
{
    return name.size() > 3 && name.compare(name.size() - 3, 3, ".pt") == 0;
}

std::vector<std::int64_t> sampleShape(int channels, int height, int width)
{
    if (channels == 1 && height == 1)
        return {width};
    return {channels, height, width};
}

std::shared_ptr<Model> makeModel(const std::string &name, int channels, int height, int width, int classes)
{
    if (isModelFile(name))
        return loadScriptModel(name, sampleShape(channels, height, width), classes);
    if (name == "mlp")
        return std::make_shared<Mlp>(channels * height * width, classes);
    if (name == "lenet5")
        return std::make_shared<LeNet5>(channels, height, width, classes);
    if (name == "cnn")
        return std::make_shared<Cnn>(channels, height, width, classes);
    throw EngineError("unknown model \"" + name + "\" (use lenet5, mlp, cnn or a TorchScript file ending in .pt)");
}

} // namespace dlion::engine
