#pragma once

#include <torch/types.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace torch::autograd {
struct Node;
} // namespace torch::autograd

namespace dlion::engine {

class Comm;

// A run of consecutive parameters whose gradients one all-reduce carries.
struct GradientBucket {
    std::size_t firstParam = 0, endParam = 0;  // [first, end) in parameter order
    std::int64_t offset = 0, size = 0;         // floats, in the flat gradient
};

// PyTorch DDP's bucket rule (reducer.cpp, compute_bucket_assignment_by_size):
// parameters, taken in reverse order (about the order backward finishes
// them), fill a bucket until it holds at least its cap; the first bucket's
// cap is `firstCapBytes`, every later one's `capBytes`. `sizes`: floats per
// parameter, which lie one after another in the flat gradient.
std::vector<GradientBucket> assignBuckets(const std::vector<std::int64_t> &sizes, double firstCapBytes, double capBytes);

// Overlaps the gradient all-reduce with backward, as DDP's reducer does: a
// hook on each parameter's gradient accumulator counts the gradients that
// are complete, and a bucket whose gradients all are goes to a
// communication thread that all-reduces it (paced on the emulated links)
// while backward goes on. Buckets start in index order on every rank, which
// keeps Gloo's collectives matched. The bucket holding the first
// parameters, which backward finishes last, waits for finish(): it carries
// the round's control slots, which need the whole step to be known.
//
// `store`: `headSize` floats (the control slots) followed by the flat
// gradient whose views are the parameters' gradients, in order.
class OverlappedAllreduce {
public:
    OverlappedAllreduce(Comm &comm, const std::vector<torch::Tensor> &params, torch::Tensor store,
                        std::int64_t headSize, double firstCapBytes, double capBytes);
    ~OverlappedAllreduce();
    OverlappedAllreduce(const OverlappedAllreduce &) = delete;
    OverlappedAllreduce &operator=(const OverlappedAllreduce &) = delete;

    const std::vector<GradientBucket> &buckets() const { return m_buckets; }

    // Before a backward: `beforeStart` runs on the backward thread before a
    // bucket's all-reduce starts (the compute pacer catches up, so the
    // bucket leaves when it would on the emulated machine).
    void begin(std::function<void()> beforeStart);

    struct Result {
        int startedDuringBackward = 0;  // buckets the hooks started
        double bytes = 0;               // all-reduced, head included
        double busyS = 0;               // the communication thread's time in all-reduces
    };
    // After the backward (and the control slots are written): starts the
    // buckets not yet started, the last with the head, and waits for all.
    // Throws what the all-reduce threw (GroupBrokenError).
    Result finish();

private:
    class ReadyHook;
    void gradientReady(std::size_t param);
    void startLocked(std::size_t bucket);
    void run();

    Comm &m_comm;
    torch::Tensor m_store;
    std::int64_t m_headSize;
    std::vector<GradientBucket> m_buckets;
    std::vector<std::size_t> m_bucketOf;  // per parameter
    std::vector<std::shared_ptr<torch::autograd::Node>> m_accumulators;
    std::vector<std::uintptr_t> m_hookKeys;

    std::mutex m_mutex;
    std::condition_variable m_changed;
    bool m_armed = false, m_quit = false;
    std::function<void()> m_beforeStart;
    std::vector<int> m_pending;  // per bucket: gradients not yet complete
    std::size_t m_next = 0;      // the next bucket to start
    std::deque<torch::Tensor> m_queue;
    std::size_t m_done = 0;      // buckets all-reduced this backward
    int m_startedEarly = 0;
    double m_busyS = 0;
    std::exception_ptr m_error;
    std::thread m_thread;
};

} // namespace dlion::engine
