#include "compute_pacer.h"

#include <thread>

#include <time.h>

namespace dlion::engine {

double ComputePacer::cpuSeconds() const
{
    timespec ts{};
    clock_gettime(m_threads == 1 ? CLOCK_THREAD_CPUTIME_ID : CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9) / m_threads;
}

void ComputePacer::begin()
{
    m_wallStart = Clock::now();
    m_cpuStart = cpuSeconds();
}

void ComputePacer::catchUp(double factor)
{
    m_emulatedS = (cpuSeconds() - m_cpuStart) * (factor < 1 ? 1 : factor);
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
