// The yardstick for the engine's per-sample speed: a plain LibTorch
// training loop, LeNet-5 in torch::nn modules, torch::optim::SGD, batch
// BATCH (default 32), THREADS intra-op threads (default 1), nothing else.
// Random inputs of Fashion-MNIST's shape: speed does not depend on the
// pixel values. Prints samples/s, and the page faults a step, as JSON.
// The allocator thresholds are the agent's (agent/allocator_thresholds.h):
// with glibc's moving default this loop ran at 3,600-3,800 samples/s with
// 630 page faults a step, or at 13,600 with none, from one invocation to
// the next.
// Usage: bench_bare_libtorch [STEPS [THREADS [BATCH]]]
#include <allocator_thresholds.h>

#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include <sys/resource.h>

namespace F = torch::nn::functional;

namespace {

long minorFaults()
{
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return usage.ru_minflt;
}

struct LeNet5 : torch::nn::Module {
    torch::nn::Conv2d conv1{torch::nn::Conv2dOptions(1, 6, 5).padding(2)};
    torch::nn::Conv2d conv2{torch::nn::Conv2dOptions(6, 16, 5)};
    torch::nn::Linear fc1{400, 120}, fc2{120, 84}, fc3{84, 10};

    LeNet5()
    {
        register_module("conv1", conv1);
        register_module("conv2", conv2);
        register_module("fc1", fc1);
        register_module("fc2", fc2);
        register_module("fc3", fc3);
    }
    torch::Tensor forward(torch::Tensor x)
    {
        x = F::max_pool2d(torch::relu(conv1(x)), F::MaxPool2dFuncOptions(2));
        x = F::max_pool2d(torch::relu(conv2(x)), F::MaxPool2dFuncOptions(2)).flatten(1);
        return fc3(torch::relu(fc2(torch::relu(fc1(x)))));
    }
};

} // namespace

int main(int argc, char **argv)
{
    dlion::agent::setAllocatorThresholds();
    const int steps = argc > 1 ? std::atoi(argv[1]) : 1500;
    const int batch = argc > 3 ? std::atoi(argv[3]) : 32;
    constexpr int kSamples = 60000, kWarm = 20;
    torch::set_num_threads(argc > 2 ? std::atoi(argv[2]) : 1);
    torch::manual_seed(1);
    const auto x = torch::randn({kSamples, 1, 28, 28});
    const auto y = torch::randint(10, {kSamples}, torch::kLong);
    const auto order = torch::randperm(kSamples, torch::kLong);
    LeNet5 model;
    torch::optim::SGD opt(model.parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
    auto start = std::chrono::steady_clock::now();
    long faults = 0;
    for (int s = 0; s < steps + kWarm; ++s) {
        if (s == kWarm) {
            start = std::chrono::steady_clock::now();
            faults = minorFaults();
        }
        const auto idx = order.narrow(0, (std::int64_t(s) * batch) % (kSamples - batch), batch);
        opt.zero_grad();
        F::cross_entropy(model.forward(x.index_select(0, idx)), y.index_select(0, idx)).backward();
        opt.step();
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("{\"system\": \"libtorch-bare\", \"samples_per_s\": %.1f, \"faults_per_step\": %.1f}\n",
                steps * batch / seconds, double(minorFaults() - faults) / steps);
    return 0;
}
