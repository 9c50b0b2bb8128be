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
class Mailbox;
class Trainer;

// What a strategy sees of the current round. Under all-reduce `rates`,
// `bandwidth` and the flags come from the control exchange at the top of
// the round, so every worker sees the same values; under the others they
// are the newest control rows that reached this worker.
struct RoundContext {
    std::int64_t round = 0;
    double elapsedS = 0;
    std::vector<double> rates;      // every worker's measured samples/s (0 = not yet measured)
    std::vector<double> bandwidth;  // n x n, bytes/s of link i -> j as measured by j (0 = unknown)
    bool mergeRequested = false;    // a user asked for a knowledge-transfer merge
    protocol::RoundRecord *record = nullptr;              // this round's telemetry, to fill
    std::function<void(const protocol::MergeEvent &)> emitMerge;
    // Strategies on a Mailbox call it while they wait for peers; false:
    // stop waiting, the worker is leaving its group.
    std::function<bool()> keepWaiting;
    // All-reduce: the gradient followed by the control slots, which its
    // all-reduce sums along; `packControl(batch)` writes them once the
    // round's batch is computed. Undefined or empty otherwise.
    torch::Tensor gradWithControl;
    std::function<void(std::int64_t batch)> packControl;
    // Sleeps until the compute so far has lasted its emulated length (the
    // worker's slowdown); work a strategy starts mid-backward calls it first.
    std::function<void()> paceCompute;
};

// A distributed training strategy: how much each worker computes and how
// workers combine what they learned. The worker loop calls, every round:
//
//   localBatch()  -> beginCompute() -> forward/backward on that many samples
//   exchange()    -> turn the local mean gradient into the step's gradient
//   optimizer step
//   afterStep()   -> model-level exchange (averaging, knowledge transfer)
//
// All-reduce makes its collective calls in the same order on every worker.
// Every other strategy talks through the group's Mailbox and never makes
// one: Gaia, Ako and Hop workers run at their own pace, and DLion waits
// only for its peers' messages of the round.
class Strategy {
public:
    virtual ~Strategy() = default;
    virtual std::int64_t localBatch(const RoundContext &ctx) = 0;
    // Just before forward/backward: a strategy that communicates during
    // backward arms its hooks here.
    virtual void beginCompute(RoundContext &) {}
    // `grad` holds this worker's mean gradient over its local batch; on
    // return it holds the gradient to step with. Fills bytesSent and the
    // per-link telemetry of ctx.record.
    virtual void exchange(torch::Tensor &grad, RoundContext &ctx) = 0;
    virtual void afterStep(RoundContext &) {}
    // This worker's estimates of its incoming links (bytes/s per peer, 0 =
    // unknown), shared with all workers in the next control exchange.
    virtual std::vector<double> incomingBandwidth() const { return {}; }
};

// Whether the named strategy talks through a Mailbox (every one but all-reduce).
bool exchangesMessages(const QString &strategy);

// Builds the strategy named in spec.strategy; throws EngineError on an
// unknown name or a bad knob in spec.strategyOptions. `mailbox` is the
// group's when exchangesMessages(spec.strategy), else null.
std::unique_ptr<Strategy> makeStrategy(const protocol::JobSpec &spec, Trainer &trainer, Comm &comm,
                                       const LinkEmulator &emulator, Mailbox *mailbox);

} // namespace dlion::engine
