#pragma once

// Private to the worker's own files (worker.cpp, message_loop.cpp).

#include "rate_meter.h"
#include "trainer.h"
#include "worker.h"

#include <chrono>

namespace dlion::engine {

using Clock = std::chrono::steady_clock;

inline double secondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// What carries over from one group generation to the next.
struct Worker::Progress {
    WorkerResult result;
    RateMeter meter;
    Clock::time_point start = Clock::now();
    double offsetS = 0;  // training time adopted from a group's source
    double pausedS = 0;
    double lastEvalT = 0;
    double lastScheduleT = -1;
    double lastCheckpointT = 0;
    bool checkpointFailing = false;  // warn once per run of failures
    double elapsed() const { return offsetS + secondsSince(start) - pausedS; }
    void adopt(double elapsedS)
    {
        start = Clock::now();
        pausedS = 0;
        offsetS = elapsedS;
    }
};

// This worker's evaluation; the caller fills in the group's figures.
inline protocol::EvalRecord evalRecord(int worker, qint64 round, double t, const EvalResult &local)
{
    protocol::EvalRecord e;
    e.worker = worker;
    e.round = round;
    e.t = t;
    e.accuracy = local.accuracy();
    e.loss = local.loss();
    return e;
}

} // namespace dlion::engine
