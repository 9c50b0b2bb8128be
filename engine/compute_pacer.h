#pragma once

#include <chrono>
#include <cstdint>
#include <functional>

namespace dlion::engine {

// Emulates a machine `factor` times slower than one core of this host, in a
// way that does not depend on what else shares the host's cores: a step's
// emulated length is the CPU time it actually used (this thread's, or the
// process's spread over `threads` for a multi-threaded step) times factor,
// and end() sleeps until that much wall time has passed since begin(); at
// factor 1 it never sleeps. Stretching the measured wall time instead would
// count the time other workers held the core as this worker's slowness,
// differently for every strategy; separate machines lend each other no CPU.
//
// A step that follows a sleep runs cold (caches refilled, on a virtual host
// a halted vCPU woken): LeNet-5's step of 32 samples used about 0.5 ms more
// CPU than back to back, and times 4 that made a worker slowed 4x run 4.7-5.2x
// slower. Once calibrated, a step counts for at most what it costs warm, so
// the factor applies to the machine's speed, not to this host's wake-ups.
class ComputePacer {
public:
    using Clock = std::chrono::steady_clock;

    // CPU seconds of a step of `samples` run back to back: fixed + per sample.
    struct StepCost {
        double fixedS = 0;
        double perSampleS = 0;
        double of(std::int64_t samples) const { return fixedS + perSampleS * double(samples); }
    };

    explicit ComputePacer(int threads = 1) : m_threads(threads < 1 ? 1 : threads) {}

    // Times `step(b)` back to back at `batch` and at a quarter of it (the
    // median of several, after warming up) and fits the step's cost.
    void calibrate(std::int64_t batch, const std::function<void(std::int64_t)> &step);
    bool calibrated() const { return m_calibrated; }
    const StepCost &stepCost() const { return m_cost; }

    // A step of `samples` begins; its CPU time counts for at most its
    // calibrated cost (0 samples, or no calibration: no bound).
    void begin(std::int64_t samples = 0);
    // Sleeps until the step so far has lasted its emulated length, so work
    // started mid-step (a gradient bucket's all-reduce) starts when it would
    // on the emulated machine.
    void catchUp(double factor);
    // Sleeps until the step has lasted its emulated length; returns how long
    // it lasted (seconds), which is never less than the emulated length.
    double end(double factor);
    // The emulated length of the last step (counted CPU seconds x factor).
    double lastEmulatedS() const { return m_emulatedS; }

private:
    double cpuSeconds() const;

    int m_threads;
    bool m_calibrated = false;
    StepCost m_cost;
    double m_boundS = 0;  // the step's calibrated cost; 0: none
    Clock::time_point m_wallStart{};
    double m_cpuStart = 0;
    double m_emulatedS = 0;
};

} // namespace dlion::engine
