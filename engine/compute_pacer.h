#pragma once

#include <chrono>

namespace dlion::engine {

// Emulates a machine `factor` times slower than one core of this host, in a
// way that does not depend on what else shares the host's cores: a step's
// emulated length is the CPU time it actually used (this thread's, or the
// process's spread over `threads` for a multi-threaded step) times factor,
// and end() sleeps until that much wall time has passed since begin(); at
// factor 1 it never sleeps. Stretching the measured wall time instead would
// count the time other workers held the core as this worker's slowness,
// differently for every strategy; separate machines lend each other no CPU.
class ComputePacer {
public:
    using Clock = std::chrono::steady_clock;

    explicit ComputePacer(int threads = 1) : m_threads(threads < 1 ? 1 : threads) {}

    void begin();
    // Sleeps until the step so far has lasted its emulated length, so work
    // started mid-step (a gradient bucket's all-reduce) starts when it would
    // on the emulated machine.
    void catchUp(double factor);
    // Sleeps until the step has lasted its emulated length; returns how long
    // it lasted (seconds), which is never less than the emulated length.
    double end(double factor);
    // The emulated length of the last step (CPU seconds x factor).
    double lastEmulatedS() const { return m_emulatedS; }

private:
    double cpuSeconds() const;

    int m_threads;
    Clock::time_point m_wallStart{};
    double m_cpuStart = 0;
    double m_emulatedS = 0;
};

} // namespace dlion::engine
