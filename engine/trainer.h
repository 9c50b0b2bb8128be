#pragma once

#include "models.h"

#include <job_spec.h>
#include <telemetry.h>

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

namespace dlion::engine {

struct EvalResult {
    std::int64_t correct = 0;
    std::int64_t count = 0;
    double lossSum = 0;
    double accuracy() const { return count ? double(correct) / double(count) : 0.0; }
    double loss() const { return count ? lossSum / double(count) : 0.0; }
};

// One replica: this worker's data (a partition of the job's, or its own),
// its model and optimizer.
//
// Parameters and gradients each live in one flat buffer (the modules'
// tensors are views into it), so strategies communicate and merge whole
// models without copies. SGD keeps its momentum in a third flat buffer, so
// a joining worker or a checkpoint takes the whole optimizer state too.
// Floating-point buffers (BatchNorm statistics) follow the parameters in
// one flat state, so whatever sends, copies or averages the state takes
// them along (docs/architecture.md, "Buffers").
class Trainer {
public:
    // Loads the data: partition `rank` of `world` of the job's dataset, or
    // all of this worker's own (JobSpec::workerData); and the test subset.
    // `gradientHead` spare floats precede the gradient in memory (see
    // gradWithHead).
    explicit Trainer(const protocol::JobSpec &spec, std::int64_t gradientHead = 0);

    // Forward and backward on the next `samples` local samples; leaves their
    // mean gradient in flatGrad(). Returns the mean loss.
    double computeGradient(std::int64_t samples);
    // The same forward and backward on the first `samples` local samples,
    // for timing a step: the data order, the batch-norm statistics and the
    // parameters stay as they were, and flatGrad() is left zero.
    void trialStep(std::int64_t samples);
    // SGD step (momentum, weight decay, lr schedule) with flatGrad().
    void step();
    // This replica on the test subset (the first eval_samples, the same on
    // every worker).
    EvalResult evaluate();
    // This replica on part `part` of `parts` of the test subset (every
    // parts-th sample).
    EvalResult evaluateShard(int part, int parts);
    // This replica on the held-out training samples every worker shares
    // (the yardstick DKT compares replicas with).
    EvalResult evaluateHeldOut(std::int64_t samples);

    torch::Tensor &flatParams() { return m_params; }
    torch::Tensor &flatGrad() { return m_grad; }
    // The last n of the spare floats and the gradient as one tensor, so a
    // collective that sends the gradient carries them in the same message.
    // They lead so that they travel with the parameters backward finishes
    // last (gradient_buckets.h).
    torch::Tensor gradWithHead(std::int64_t n) const;
    torch::Tensor &flatMomentum() { return m_momentum; }
    // The floating-point buffers (BatchNorm statistics), flat like the
    // parameters; empty for a model without them.
    torch::Tensor &flatBuffers() { return m_buffers; }
    // The parameters followed by the buffers: the replica's whole model.
    torch::Tensor &flatState() { return m_state; }
    std::int64_t parameterCount() const { return m_params.numel(); }
    std::int64_t bufferCount() const { return m_buffers.numel(); }
    std::int64_t stateCount() const { return m_state.numel(); }
    // The model's input per sample, from the dataset: (C, H, W) for
    // images, (features) for tabular data (sampleShape).
    const std::vector<std::int64_t> &inputShape() const { return m_inputShape; }
    // FNV-1a over the parameter bytes: equal digests mean identical replicas.
    std::uint64_t parameterDigest() const;
    std::int64_t localTrainSize() const { return m_trainX.size(0); }
    std::int64_t globalTrainSize() const { return m_globalTrainSize; }
    std::int64_t round() const { return m_round; }
    void setRound(std::int64_t round) { m_round = round; }  // the lr schedule's clock
    Model &model() { return *m_model; }
    // What this worker trains and is scored on.
    const protocol::DataSummary &dataSummary() const { return m_data; }

private:
    torch::Tensor nextBatchIndices(std::int64_t samples);
    // Forward and backward on the samples `idx`; returns the mean loss.
    double gradientOn(const torch::Tensor &idx);
    // `x`: samples as stored (uint8 images or float features); y: labels.
    EvalResult evaluateOn(const torch::Tensor &x, const torch::Tensor &y);
    // Stored samples -> the model's float input.
    torch::Tensor normalised(const torch::Tensor &samples);

    protocol::JobSpec m_spec;
    protocol::LrSchedule m_schedule;  // m_spec's, parsed
    std::shared_ptr<Model> m_model;
    torch::Tensor m_state, m_params, m_buffers;  // the latter two are views into m_state
    torch::Tensor m_gradStore, m_grad, m_momentum;  // m_grad: a view into m_gradStore, after the spare floats
    std::vector<std::int64_t> m_inputShape;
    torch::Tensor m_trainX, m_trainY, m_testX, m_testY, m_heldX, m_heldY;  // NCHW, uint8 or float
    torch::Tensor m_featureMean, m_featureStd;  // float data's standardisation
    // The last batch, normalised, in one buffer reused by every batch: a
    // fresh float tensor per batch made LeNet-5's step 30% slower (page
    // faults of the allocations) than the floats this replaces.
    torch::Tensor m_input = torch::empty({0});
    float m_scale = 1, m_shift = 0;  // byte -> normalised pixel: b * scale - shift
    torch::Tensor m_order;
    std::int64_t m_cursor = 0;
    std::int64_t m_round = 0;
    std::int64_t m_globalTrainSize = 0;
    protocol::DataSummary m_data;
    std::mt19937_64 m_rng;
};

// The model of checkpoint `path` as TorchScript (Model::torchScript), or
// with `stateDict` as a built-in model's state_dict (Model::stateDict).
// `spec` names the dataset, whose input shape the model needs; the model
// itself is the checkpoint's. Throws EngineError naming the file, also when
// a TorchScript model is asked for a state_dict.
std::string exportCheckpoint(const QString &path, protocol::JobSpec spec, bool stateDict);

} // namespace dlion::engine
