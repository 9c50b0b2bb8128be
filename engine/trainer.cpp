#include "trainer.h"

#include "checkpoint.h"
#include "dataset_source.h"
#include "engine_error.h"
#include "partitioner.h"

#include <torch/nn/functional/loss.h>
#include <torch/utils.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

namespace dlion::engine {

namespace {

// The selected samples as an NCHW tensor: bytes stay uint8, a quarter of
// the memory of floats, normalised as batches are drawn; float features
// stay float.
torch::Tensor toImages(const RawDataset &d, const std::vector<std::int64_t> &indices)
{
    auto out = torch::empty({std::int64_t(indices.size()), d.channels, d.height, d.width},
                            d.floats ? torch::kFloat : torch::kByte);
    d.copySamples(indices, out.data_ptr());
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

std::vector<std::string> toStd(const QStringList &names)
{
    std::vector<std::string> out;
    for (const QString &n : names)
        out.push_back(n.toStdString());
    return out;
}

// The test split must fit the model the training data built.
void checkTestFits(const RawDataset &train, const RawDataset &test, const protocol::WorkerData &from)
{
    const std::string where = from.dataset.toStdString() + " data in \"" + from.dataDir.toStdString() + "\"";
    if (test.floats != train.floats || test.sampleBytes() != train.sampleBytes() || test.height != train.height)
        throw EngineError("the test split of " + where + " has samples of another shape or type than the training "
                          "split; both must match");
    if (test.classes > train.classes)
        throw EngineError("the test split of " + where + " has labels up to " + std::to_string(test.classes - 1)
                          + " but the training split only up to " + std::to_string(train.classes - 1)
                          + "; set class_names in the job to fix the classes");
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

Trainer::Trainer(const protocol::JobSpec &spec, std::int64_t gradientHead) : m_spec(spec), m_rng(spec.seed * 7919 + std::uint64_t(spec.rank))
{
    const std::optional<protocol::LrSchedule> schedule = protocol::LrSchedule::parse(spec.lrSchedule);
    if (!schedule)
        throw EngineError("lr_schedule \"" + spec.lrSchedule.toStdString() + "\" is not a schedule; see the job file's reference in the README");
    m_schedule = *schedule;
    const std::vector<std::string> classNames = toStd(spec.classNames);
    const protocol::WorkerData own = spec.dataFor(spec.rank);
    const RawDataset train = loadDataset(own.dataset.toStdString(), own.dataDir.toStdString(), Split::Train, classNames);
    // The last samples form a held-out set (DKT's yardstick), common to all
    // workers unless each trains on its own data; the rest is trained on,
    // partitioned over the workers when the data are shared.
    const bool ownData = !spec.workerData.isEmpty();
    const std::int64_t heldOut = std::min<std::int64_t>(1000, train.size / 10);
    const std::int64_t usable = train.size - heldOut;
    m_globalTrainSize = ownData ? usable * spec.world : usable;  // with own data: epochs of this worker's size
    std::vector<std::int64_t> mine(static_cast<std::size_t>(usable));
    std::iota(mine.begin(), mine.end(), 0);
    if (!ownData) {
        const std::vector<std::uint8_t> labels(train.labels.begin(), train.labels.end() - heldOut);
        mine = partitionIndices(labels, train.classes, spec.world, spec.dirichletAlpha(), spec.seed)[std::size_t(spec.rank)];
    }
    m_scale = 1.f / (255.f * train.std);
    m_shift = train.mean / train.std;
    m_trainY = toLabels(train, mine);
    std::vector<std::int64_t> held(static_cast<std::size_t>(heldOut));
    std::iota(held.begin(), held.end(), usable);
    m_heldY = toLabels(train, held);
    // One read for both (an IDX file is streamed, not held).
    const std::int64_t trained = std::int64_t(mine.size());
    mine.insert(mine.end(), held.begin(), held.end());
    const torch::Tensor samples = toImages(train, mine);
    m_trainX = samples.narrow(0, 0, trained);
    m_heldX = samples.narrow(0, trained, heldOut);
    if (train.floats) {
        // Float features are standardised per feature with this worker's
        // training statistics (constant features keep their scale).
        m_featureMean = m_trainX.mean(0, true);
        m_featureStd = m_trainX.std(0, false, true);
        m_featureStd.masked_fill_(m_featureStd < 1e-6, 1.0);
    }

    const protocol::WorkerData testFrom = ownData && spec.testSet == QLatin1String("local")
                                              ? own : protocol::WorkerData{spec.dataset, spec.dataDir};
    const RawDataset test = loadDataset(testFrom.dataset.toStdString(), testFrom.dataDir.toStdString(), Split::Test, classNames);
    checkTestFits(train, test, testFrom);
    // The test subset: the first eval_samples, the same on every worker
    // that scores the same split.
    std::vector<std::int64_t> subset(std::size_t(std::min<std::int64_t>(spec.evalSamples, test.size)));
    std::iota(subset.begin(), subset.end(), 0);
    m_testX = toImages(test, subset);
    m_testY = toLabels(test, subset);

    m_data.worker = spec.rank;
    m_data.dataset = own.dataset;
    m_data.dataDir = own.dataDir;
    m_data.samples = m_trainX.size(0);
    m_data.testSamples = m_testX.size(0);
    const auto counts = torch::bincount(m_trainY, {}, train.classes);
    for (std::int64_t c = 0; c < counts.size(0); ++c)
        m_data.histogram.append(counts[c].item<std::int64_t>());

    if (train.height == 1 && spec.model != QLatin1String("mlp") && !isModelFile(spec.model.toStdString()))
        throw EngineError("model \"" + spec.model.toStdString() + "\" needs images; tabular data ("
                          + own.dataset.toStdString() + " with one row of features per sample) trains with model mlp "
                          "or a TorchScript module (FILE.pt) that takes (N, features) floats");
    // Same seed on every worker: replicas start identical.
    torch::manual_seed(spec.seed);
    try {
        m_model = makeModel(spec.model.toStdString(), train.channels, train.height, train.width, train.classes);
    } catch (const c10::Error &) {
        // The layers do not fit the data (e.g. LeNet-5's 5x5 kernels on 8x8 arrays).
        throw EngineError("model \"" + spec.model.toStdString() + "\" cannot take samples of "
                          + std::to_string(train.channels) + "x" + std::to_string(train.height) + "x"
                          + std::to_string(train.width) + " from " + own.dataset.toStdString()
                          + " data; choose a model for that size (mlp takes any)");
    }
    m_inputShape = sampleShape(train.channels, train.height, train.width);
    const auto params = m_model->parameters();
    const auto buffers = floatingBuffers(*m_model);
    const std::int64_t count = totalSize(params);
    m_state = torch::empty({count + totalSize(buffers)});
    m_params = m_state.narrow(0, 0, count);
    m_buffers = m_state.narrow(0, count, m_state.numel() - count);
    m_gradStore = torch::zeros({gradientHead + count});
    m_grad = m_gradStore.narrow(0, gradientHead, count);
    viewsInto(params, m_params, &m_grad);
    viewsInto(buffers, m_buffers, nullptr);
    m_momentum = torch::zeros_like(m_params);
    m_cursor = m_trainX.size(0);  // the first batch shuffles
}

torch::Tensor Trainer::gradWithHead(std::int64_t n) const
{
    const std::int64_t spare = m_gradStore.numel() - m_grad.numel();
    TORCH_CHECK(n >= 0 && n <= spare, "gradWithHead: ", n, " floats asked, ", spare, " spare");
    return m_gradStore.narrow(0, spare - n, n + m_grad.numel());
}

torch::Tensor Trainer::normalised(const torch::Tensor &samples)
{
    m_input.resize_(samples.sizes());
    if (samples.scalar_type() == torch::kFloat)
        return m_input.copy_(samples).sub_(m_featureMean).div_(m_featureStd);
    return m_input.copy_(samples).mul_(m_scale).sub_(m_shift);
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
    return gradientOn(nextBatchIndices(std::max<std::int64_t>(samples, 1)));
}

void Trainer::trialStep(std::int64_t samples)
{
    const auto buffers = m_buffers.clone();
    gradientOn(torch::arange(std::clamp<std::int64_t>(samples, 1, m_trainX.size(0)), torch::kLong));
    m_buffers.copy_(buffers);
    m_grad.zero_();
}

double Trainer::gradientOn(const torch::Tensor &idx)
{
    m_model->train();
    const auto x = normalised(m_trainX.index_select(0, idx));
    const auto y = m_trainY.index_select(0, idx);
    m_grad.zero_();
    auto loss = torch::nn::functional::cross_entropy(m_model->forward(x), y);
    loss.backward();
    return loss.item<double>();
}

void Trainer::step()
{
    const double lr = m_spec.lr * m_schedule.factor(m_round);
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
    // Bounds the activations in flight: LeNet-5's first layer alone takes
    // 19 MB for 1000 samples.
    constexpr std::int64_t kChunk = 250;
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

std::string exportCheckpoint(const QString &path, protocol::JobSpec spec, bool stateDict)
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
    if (!stateDict)
        return trainer.model().torchScript();
    std::string bytes = trainer.model().stateDict();
    if (bytes.empty())
        throw EngineError(QStringLiteral("checkpoint %1: its model \"%2\" is a TorchScript module, which has no separate "
                                         "state_dict; export it without --state-dict")
                              .arg(path, c.model).toStdString());
    return bytes;
}

} // namespace dlion::engine
