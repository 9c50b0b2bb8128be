#pragma once

#include <job_spec.h>
#include <telemetry.h>

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace dlion::engine {

class Comm;
class LinkEmulator;
class Trainer;

// What a strategy sees of the current round. `rates` and the flags come from
// the control exchange at the top of the round, so every worker sees the same
// values and can take the same decisions without further messages.
struct RoundContext {
    std::int64_t round = 0;
    double elapsedS = 0;
    std::vector<double> rates;      // every worker's measured samples/s (0 = not yet measured)
    std::vector<double> bandwidth;  // n x n, bytes/s of link i -> j as measured by j (0 = unknown)
    bool mergeRequested = false;    // a user asked for a knowledge-transfer merge
    protocol::RoundRecord *record = nullptr;              // this round's telemetry, to fill
    std::function<void(const protocol::MergeEvent &)> emitMerge;
};

// A distributed training strategy: how much each worker computes and how
// workers combine what they learned. The worker loop calls, every round:
//
//   localBatch()  -> forward/backward on that many samples
//   exchange()    -> turn the local mean gradient into the step's gradient
//   optimizer step
//   afterStep()   -> model-level exchange (averaging, knowledge transfer)
//
// All collective calls must be made in the same order on every worker.
class Strategy {
public:
    virtual ~Strategy() = default;
    virtual std::int64_t localBatch(const RoundContext &ctx) = 0;
    // `grad` holds this worker's mean gradient over its local batch; on
    // return it holds the gradient to step with. Fills bytesSent and the
    // per-link telemetry of ctx.record.
    virtual void exchange(torch::Tensor &grad, RoundContext &ctx) = 0;
    virtual void afterStep(RoundContext &) {}
    // This worker's estimates of its incoming links (bytes/s per peer, 0 =
    // unknown), shared with all workers in the next control exchange.
    virtual std::vector<double> incomingBandwidth() const { return {}; }
};

// Builds the strategy named in spec.strategy; throws EngineError on an
// unknown name or a bad knob in spec.strategyOptions.
std::unique_ptr<Strategy> makeStrategy(const protocol::JobSpec &spec, Trainer &trainer, Comm &comm,
                                       const LinkEmulator &emulator);

} // namespace dlion::engine
