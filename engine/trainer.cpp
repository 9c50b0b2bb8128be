#include "trainer.h"

#include "checkpoint.h"
#include "dataset_source.h"
#include "engine_error.h"
#include "partitioner.h"

#include <torch/nn/functional/loss.h>
#include <torch/utils.h>

#include <cmath>
#include <cstring>
#include <numeric>

namespace dlion::engine {

namespace {

// The selected samples' bytes as an NCHW uint8 tensor: a quarter of the
// memory of floats (188 MB for Fashion-MNIST's training set on one worker);
// batches are normalised as they are drawn.
torch::Tensor toImages(const RawDataset &d, const std::vector<std::int64_t> &indices)
{
    const std::int64_t px = d.sampleBytes();
    auto out = torch::empty({std::int64_t(indices.size()), d.channels, d.height, d.width}, torch::kByte);
    std::uint8_t *dst = out.data_ptr<std::uint8_t>();
    for (std::size_t i = 0; i < indices.size(); ++i)
        std::memcpy(dst + std::int64_t(i) * px, d.pixels.data() + indices[i] * px, std::size_t(px));
    return out;
}

torch::Tensor toLabels(const RawDataset &d, const std::vector<std::int64_t> &indices)
{
    auto out = torch::empty({std::int64_t(indices.size())}, torch::kLong);
    auto *dst = out.data_ptr<std::int64_t>();
    for (std::size_t i = 0; i < indices.size(); ++i)
        dst[i] = d.labels[std::size_t(indices[i])];
    return out;
}

std::int64_t totalSize(const std::vector<torch::Tensor> &tensors)
{
    std::int64_t total = 0;
    for (const auto &t : tensors)
        total += t.numel();
    return total;
}

// Makes each tensor a view into `flat` (their total size), and with
// `grads` its gradient a view into that.
void viewsInto(const std::vector<torch::Tensor> &tensors, const torch::Tensor &flat, const torch::Tensor *grads)
{
    std::int64_t offset = 0;
    torch::NoGradGuard noGrad;
    for (auto t : tensors) {
        const std::int64_t n = t.numel();
        auto view = flat.narrow(0, offset, n).view_as(t);
        view.copy_(t);
        t.set_data(view);
        if (grads)
            t.mutable_grad() = grads->narrow(0, offset, n).view_as(t);
        offset += n;
    }
}

// The buffers averaged and copied with the parameters (BatchNorm's running
// statistics); integer ones (num_batches_tracked) stay each replica's own.
std::vector<torch::Tensor> floatingBuffers(Model &model)
{
    std::vector<torch::Tensor> out;
    for (const auto &b : model.buffers()) {
        if (b.is_floating_point())
            out.push_back(b);
    }
    return out;
}

} // namespace

Trainer::Trainer(const protocol::JobSpec &spec) : m_spec(spec), m_rng(spec.seed * 7919 + std::uint64_t(spec.rank))
{
    const std::string dir = spec.dataDir.toStdString();
    const RawDataset train = loadDataset(spec.dataset.toStdString(), dir, Split::Train);
    // The last samples form a held-out set common to all workers (DKT's
    // yardstick); the rest is partitioned.
    const std::int64_t heldOut = std::min<std::int64_t>(1000, train.size / 10);
    m_globalTrainSize = train.size - heldOut;
    const std::vector<std::uint8_t> labels(train.labels.begin(), train.labels.end() - heldOut);
    const auto parts = partitionIndices(labels, train.classes, spec.world, spec.dirichletAlpha(), spec.seed);
    const auto &mine = parts[std::size_t(spec.rank)];
    m_scale = 1.f / (255.f * train.std);
    m_shift = train.mean / train.std;
    m_trainX = toImages(train, mine);
    m_trainY = toLabels(train, mine);
    std::vector<std::int64_t> held(static_cast<std::size_t>(heldOut));
    std::iota(held.begin(), held.end(), m_globalTrainSize);
    m_heldX = toImages(train, held);
    m_heldY = toLabels(train, held);

    const RawDataset test = loadDataset(spec.dataset.toStdString(), dir, Split::Test);
    // The test subset: the first eval_samples, the same on every worker.
    std::vector<std::int64_t> subset(std::size_t(std::min<std::int64_t>(spec.evalSamples, test.size)));
    std::iota(subset.begin(), subset.end(), 0);
    m_testX = toImages(test, subset);
    m_testY = toLabels(test, subset);

    // Same seed on every worker: replicas start identical.
    torch::manual_seed(spec.seed);
    m_model = makeModel(spec.model.toStdString(), train.channels, train.height, train.width, train.classes);
    m_inputShape = {train.channels, train.height, train.width};
    const auto params = m_model->parameters();
    const auto buffers = floatingBuffers(*m_model);
    const std::int64_t count = totalSize(params);
    m_state = torch::empty({count + totalSize(buffers)});
    m_params = m_state.narrow(0, 0, count);
    m_buffers = m_state.narrow(0, count, m_state.numel() - count);
    m_grad = torch::zeros({count});
    viewsInto(params, m_params, &m_grad);
    viewsInto(buffers, m_buffers, nullptr);
    m_momentum = torch::zeros_like(m_params);
    m_cursor = m_trainX.size(0);  // the first batch shuffles
}

torch::Tensor Trainer::normalised(const torch::Tensor &bytes)
{
    m_input.resize_(bytes.sizes());
    return m_input.copy_(bytes).mul_(m_scale).sub_(m_shift);
}

torch::Tensor Trainer::nextBatchIndices(std::int64_t samples)
{
    const std::int64_t n = m_trainX.size(0);
    samples = std::min(samples, n);
    if (m_cursor + samples > n) {
        // New local epoch: reshuffle (deterministic per worker and seed).
        std::vector<std::int64_t> order(static_cast<std::size_t>(n));
        std::iota(order.begin(), order.end(), 0);
        std::shuffle(order.begin(), order.end(), m_rng);
        m_order = torch::tensor(order, torch::kLong);
        m_cursor = 0;
    }
    auto idx = m_order.narrow(0, m_cursor, samples);
    m_cursor += samples;
    return idx;
}

double Trainer::computeGradient(std::int64_t samples)
{
    m_model->train();
    const auto idx = nextBatchIndices(std::max<std::int64_t>(samples, 1));
    const auto x = normalised(m_trainX.index_select(0, idx));
    const auto y = m_trainY.index_select(0, idx);
    m_grad.zero_();
    auto loss = torch::nn::functional::cross_entropy(m_model->forward(x), y);
    loss.backward();
    return loss.item<double>();
}

void Trainer::step()
{
    // lr schedule "step:ROUNDS:GAMMA" multiplies lr by GAMMA every ROUNDS rounds.
    double lr = m_spec.lr;
    if (m_spec.lrSchedule.startsWith(QLatin1String("step:"))) {
        const QStringList parts = m_spec.lrSchedule.split(':');
        lr *= std::pow(parts[2].toDouble(), double(m_round / parts[1].toLongLong()));
    }
    // torch::optim::SGD's update (no dampening, no Nesterov) on flat buffers.
    torch::NoGradGuard noGrad;
    torch::Tensor d = m_spec.weightDecay > 0 ? m_grad.add(m_params, m_spec.weightDecay) : m_grad;
    if (m_spec.momentum > 0)
        d = m_momentum.mul_(m_spec.momentum).add_(d);
    m_params.add_(d, -lr);
    ++m_round;
}

EvalResult Trainer::evaluateOn(const torch::Tensor &x, const torch::Tensor &y)
{
    torch::NoGradGuard noGrad;
    m_model->eval();
    EvalResult r;
    constexpr std::int64_t kChunk = 1000;
    for (std::int64_t off = 0; off < x.size(0); off += kChunk) {
        const std::int64_t n = std::min(kChunk, x.size(0) - off);
        const auto logits = m_model->forward(normalised(x.narrow(0, off, n)));
        const auto yy = y.narrow(0, off, n);
        r.lossSum += torch::nn::functional::cross_entropy(
                         logits, yy, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                         .item<double>();
        r.correct += logits.argmax(1).eq(yy).sum().item<std::int64_t>();
        r.count += n;
    }
    m_model->train();
    return r;
}

std::uint64_t Trainer::parameterDigest() const
{
    const auto *p = static_cast<const unsigned char *>(m_params.data_ptr());
    const std::size_t n = std::size_t(m_params.numel()) * sizeof(float);
    std::uint64_t h = 1469598103934665603ull;
    for (std::size_t i = 0; i < n; ++i)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

EvalResult Trainer::evaluate()
{
    return evaluateOn(m_testX, m_testY);
}

EvalResult Trainer::evaluateShard(int part, int parts)
{
    const auto n = m_testX.size(0);
    return evaluateOn(m_testX.slice(0, part, n, parts), m_testY.slice(0, part, n, parts));
}

EvalResult Trainer::evaluateHeldOut(std::int64_t samples)
{
    const std::int64_t n = std::min(samples, m_heldX.size(0));
    return evaluateOn(m_heldX.narrow(0, 0, n), m_heldY.narrow(0, 0, n));
}

std::string exportCheckpoint(const QString &path, protocol::JobSpec spec)
{
    const Checkpoint c = Checkpoint::load(path);
    spec.model = c.model;
    Trainer trainer(spec);
    if (std::int64_t(c.params.size()) != trainer.parameterCount() || std::int64_t(c.buffers.size()) != trainer.bufferCount())
        throw EngineError(QStringLiteral("checkpoint %1: its %2 parameters and %3 buffer values do not fit model \"%4\" on "
                                         "%5 (%6 and %7); give the dataset it was trained on")
                              .arg(path).arg(c.params.size()).arg(c.buffers.size()).arg(c.model, spec.dataset)
                              .arg(trainer.parameterCount()).arg(trainer.bufferCount()).toStdString());
    std::memcpy(trainer.flatParams().data_ptr<float>(), c.params.data(), c.params.size() * sizeof(float));
    std::memcpy(trainer.flatBuffers().data_ptr<float>(), c.buffers.data(), c.buffers.size() * sizeof(float));
    return trainer.model().serialized();
}

} // namespace dlion::engine
