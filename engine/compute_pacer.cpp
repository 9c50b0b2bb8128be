#include "compute_pacer.h"

#include <algorithm>
#include <thread>
#include <vector>

#include <time.h>

namespace dlion::engine {

double ComputePacer::cpuSeconds() const
{
    timespec ts{};
    clock_gettime(m_threads == 1 ? CLOCK_THREAD_CPUTIME_ID : CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9) / m_threads;
}

void ComputePacer::calibrate(std::int64_t batch, const std::function<void(std::int64_t)> &step)
{
    constexpr int kWarm = 3, kTimed = 9;
    const auto medianCost = [&](std::int64_t samples) {
        std::vector<double> s;
        for (int i = 0; i < kWarm + kTimed; ++i) {
            const double start = cpuSeconds();
            step(samples);
            if (i >= kWarm)
                s.push_back(cpuSeconds() - start);
        }
        std::nth_element(s.begin(), s.begin() + kTimed / 2, s.end());
        return s[kTimed / 2];
    };
    const std::int64_t hi = std::max<std::int64_t>(batch, 1), lo = std::max<std::int64_t>(hi / 4, 1);
    const double costHi = medianCost(hi), costLo = lo < hi ? medianCost(lo) : costHi;
    // Noise can make the small batch the dearer one: then a flat cost.
    m_cost.perSampleS = lo < hi ? std::max(0.0, (costHi - costLo) / double(hi - lo)) : 0.0;
    m_cost.fixedS = std::max(0.0, costHi - m_cost.perSampleS * double(hi));
    m_calibrated = true;
}

void ComputePacer::begin(std::int64_t samples)
{
    m_boundS = m_calibrated && samples > 0 ? m_cost.of(samples) : 0;
    m_wallStart = Clock::now();
    m_cpuStart = cpuSeconds();
}

void ComputePacer::catchUp(double factor)
{
    double used = cpuSeconds() - m_cpuStart;
    if (m_boundS > 0)
        used = std::min(used, m_boundS);
    m_emulatedS = used * (factor < 1 ? 1 : factor);
    // Unslowed, there is nothing to emulate; and the process clock a
    // multi-threaded step reads ran ahead of the wall time by a millisecond
    // a step (tst_compute_pacer), which made a 2-thread worker sleep.
    if (factor <= 1)
        return;
    std::this_thread::sleep_until(m_wallStart + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(m_emulatedS)));
}

double ComputePacer::end(double factor)
{
    catchUp(factor);
    return std::chrono::duration<double>(Clock::now() - m_wallStart).count();
}

} // namespace dlion::engine
