// ComputePacer: a worker emulated s times slower takes s times its CPU time
// per step, whether the host's other cores are idle or all busy.
#include <compute_pacer.h>

#include "common/median.h"

#include <QtTest>

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include <time.h>

using dlion::engine::ComputePacer;

namespace {

double threadCpuS()
{
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

// Burns `seconds` of this thread's CPU time, however long that takes.
void burn(double seconds)
{
    const double until = threadCpuS() + seconds;
    volatile double x = 1;
    while (threadCpuS() < until) {
        for (int i = 0; i < 1000; ++i)
            x = x * 1.0000001 + 1e-9;
    }
}

using dlion::test::median;

struct Steps {
    double pacedS = 0;    // median paced step
    double computeS = 0;  // median wall time of the work alone
};

Steps measure(double factor, int steps = 25, double work = 0.004, int threads = 1)
{
    ComputePacer pacer(threads);
    std::vector<double> paced, compute;
    for (int i = 0; i < steps; ++i) {
        const auto t0 = ComputePacer::Clock::now();
        pacer.begin();
        burn(work);
        compute.push_back(std::chrono::duration<double>(ComputePacer::Clock::now() - t0).count());
        paced.push_back(pacer.end(factor));
    }
    return {median(paced), median(compute)};
}

// Keeps every core of the host busy while it lives.
class Load {
public:
    Load()
    {
        for (unsigned i = 0; i < std::max(2u, std::thread::hardware_concurrency()); ++i)
            m_threads.emplace_back([this] {
                volatile double x = 1;
                while (!m_stop)
                    x = x * 1.0000001 + 1e-9;
            });
    }
    ~Load()
    {
        m_stop = true;
        for (auto &t : m_threads)
            t.join();
    }

private:
    std::atomic<bool> m_stop{false};
    std::vector<std::thread> m_threads;
};

} // namespace

class TestComputePacer : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void slowdownIsIndependentOfHostLoad();
    void stepLastsAtLeastItsEmulatedLength();
    void unslowedMultiThreadedStepIsNotDelayed();
    void aColdStepCountsWhatItCostsWarm();
};

void TestComputePacer::slowdownIsIndependentOfHostLoad()
{
    constexpr double kFactor = 4;
    const Steps idle = measure(kFactor);
    Steps busy;
    {
        Load load;
        busy = measure(kFactor);
    }
    qInfo("slowdown %.0f: step %.2f ms idle, %.2f ms with every core busy (the work alone: %.2f ms idle, %.2f ms busy)",
          kFactor, idle.pacedS * 1e3, busy.pacedS * 1e3, idle.computeS * 1e3, busy.computeS * 1e3);
    // The load must really take CPU from the worker, or the check says nothing.
    QVERIFY2(busy.computeS > 1.2 * idle.computeS, "the host load did not slow the work down");
    QVERIFY2(std::abs(busy.pacedS - idle.pacedS) <= 0.1 * idle.pacedS,
             qPrintable(QString("paced step %1 ms busy vs %2 ms idle").arg(busy.pacedS * 1e3).arg(idle.pacedS * 1e3)));
    // And the step is the factor times the work's CPU time.
    QVERIFY2(std::abs(idle.pacedS - kFactor * 0.004) <= 0.1 * kFactor * 0.004, qPrintable(QString::number(idle.pacedS)));
}

void TestComputePacer::stepLastsAtLeastItsEmulatedLength()
{
    ComputePacer pacer;
    pacer.begin();
    burn(0.002);
    const double s = pacer.end(3);
    QVERIFY(pacer.lastEmulatedS() >= 0.006 * 0.95);
    QVERIFY(s >= pacer.lastEmulatedS());
    // A factor below 1 is taken as 1: the pacer never speeds a machine up.
    pacer.begin();
    burn(0.002);
    pacer.end(0.25);
    QVERIFY(pacer.lastEmulatedS() >= 0.002 * 0.95);
}

void TestComputePacer::unslowedMultiThreadedStepIsNotDelayed()
{
    // A 2-thread step reads the process's CPU clock, which read about a
    // millisecond more per 2 ms step than two cores can spend: at slowdown
    // 1 that became a sleep (a 2-thread worker trained 0.76-0.97x as fast
    // as with one thread), so nothing is paced there. The load's threads
    // spin in this process, as idle OpenMP workers do.
    Steps steps;
    {
        Load load;
        steps = measure(1, 200, 0.002, 2);
    }
    qInfo("slowdown 1, 2 threads: step %.3f ms, the work alone %.3f ms", steps.pacedS * 1e3, steps.computeS * 1e3);
    QVERIFY2(steps.pacedS <= steps.computeS * 1.1 + 1e-4,
             qPrintable(QString("paced step %1 ms, the work %2 ms").arg(steps.pacedS * 1e3).arg(steps.computeS * 1e3)));
}

void TestComputePacer::aColdStepCountsWhatItCostsWarm()
{
    // A step of 50 us a sample that, as LeNet-5's on this host, uses 1 ms
    // more CPU when it follows a pause (cold caches, a woken vCPU).
    constexpr double kPerSample = 50e-6, kColdPenalty = 1e-3, kFactor = 4;
    constexpr std::int64_t kBatch = 32;
    auto lastEnd = ComputePacer::Clock::now();
    const auto step = [&](std::int64_t samples) {
        if (ComputePacer::Clock::now() - lastEnd > std::chrono::microseconds(300))
            burn(kColdPenalty);
        burn(kPerSample * double(samples));
        lastEnd = ComputePacer::Clock::now();
    };
    const auto pacedMedian = [&](ComputePacer &pacer) {
        std::vector<double> paced;
        for (int i = 0; i < 15; ++i) {
            pacer.begin(kBatch);
            step(kBatch);
            paced.push_back(pacer.end(kFactor));
        }
        return median(paced);
    };
    ComputePacer raw, calibrated;
    calibrated.calibrate(kBatch, step);
    const double warm = kPerSample * double(kBatch);
    QVERIFY2(std::abs(calibrated.stepCost().of(kBatch) - warm) <= 0.1 * warm,
             qPrintable(QString("calibrated %1 ms for %2 ms warm").arg(calibrated.stepCost().of(kBatch) * 1e3).arg(warm * 1e3)));
    QVERIFY(std::abs(calibrated.stepCost().of(kBatch / 4) - warm / 4) <= 0.1 * warm);
    const double rawS = pacedMedian(raw), calibratedS = pacedMedian(calibrated);
    qInfo("slowdown %.0f, a cold step: %.2f ms paced raw, %.2f ms calibrated (warm %.2f ms)", kFactor, rawS * 1e3,
          calibratedS * 1e3, warm * 1e3);
    // Unbounded, the pause's penalty is slowed too: the machine is slower than asked.
    QVERIFY(rawS >= kFactor * (warm + kColdPenalty) * 0.95);
    QVERIFY2(std::abs(calibratedS - kFactor * warm) <= 0.1 * kFactor * warm, qPrintable(QString::number(calibratedS)));
}

QTEST_GUILESS_MAIN(TestComputePacer)
#include "tst_compute_pacer.moc"
