#include "gradient_buckets.h"

#include "comm.h"
#include "engine_error.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>

#include <chrono>

namespace dlion::engine {

std::vector<GradientBucket> assignBuckets(const std::vector<std::int64_t> &sizes, double firstCapBytes, double capBytes)
{
    std::vector<std::int64_t> offsets(sizes.size() + 1, 0);
    for (std::size_t i = 0; i < sizes.size(); ++i)
        offsets[i + 1] = offsets[i] + sizes[i];
    std::vector<GradientBucket> out;
    std::size_t end = sizes.size();
    double bytes = 0;
    for (std::size_t i = sizes.size(); i-- > 0;) {
        bytes += double(sizes[i]) * sizeof(float);
        if (bytes >= (out.empty() ? firstCapBytes : capBytes) || i == 0) {
            out.push_back({i, end, offsets[i], offsets[end] - offsets[i]});
            end = i;
            bytes = 0;
        }
    }
    return out;
}

// Runs after autograd has added a backward's gradient into the parameter's
// (flat-buffer) gradient.
class OverlappedAllreduce::ReadyHook : public torch::autograd::FunctionPostHook {
public:
    ReadyHook(OverlappedAllreduce *owner, std::size_t param) : m_owner(owner), m_param(param) {}
    torch::autograd::variable_list operator()(const torch::autograd::variable_list &outputs,
                                              const torch::autograd::variable_list &) override
    {
        m_owner->gradientReady(m_param);
        return outputs;
    }

private:
    OverlappedAllreduce *m_owner;
    std::size_t m_param;
};

OverlappedAllreduce::OverlappedAllreduce(Comm &comm, const std::vector<torch::Tensor> &params, torch::Tensor store,
                                         std::int64_t headSize, double firstCapBytes, double capBytes)
    : m_comm(comm), m_store(std::move(store)), m_headSize(headSize)
{
    // The layout is read from memory, so a gradient that is no view into
    // the store is caught here rather than all-reduced stale.
    const float *grads = m_store.data_ptr<float>() + headSize;
    std::vector<std::int64_t> sizes;
    std::int64_t expected = 0;
    for (const auto &p : params) {
        if (!p.grad().defined() || p.grad().data_ptr<float>() != grads + expected)
            throw EngineError("gradient buckets need every parameter's gradient to be a view into the flat gradient, "
                              "in parameter order");
        sizes.push_back(p.numel());
        expected += p.numel();
    }
    if (headSize + expected != m_store.numel())
        throw EngineError("gradient buckets: the flat gradient and its head do not fill the buffer given");
    m_buckets = assignBuckets(sizes, firstCapBytes, capBytes);
    m_bucketOf.resize(params.size());
    for (std::size_t b = 0; b < m_buckets.size(); ++b) {
        for (std::size_t i = m_buckets[b].firstParam; i < m_buckets[b].endParam; ++i)
            m_bucketOf[i] = b;
    }
    m_pending.assign(m_buckets.size(), 0);
    // Only buckets the hooks may start need them: the last one waits for finish().
    for (std::size_t i = 0; i < params.size(); ++i) {
        if (m_bucketOf[i] + 1 == m_buckets.size())
            continue;
        auto accumulator = torch::autograd::impl::grad_accumulator(params[i]);
        m_hookKeys.push_back(accumulator->add_post_hook(std::make_unique<ReadyHook>(this, i)));
        m_accumulators.push_back(std::move(accumulator));
    }
    m_thread = std::thread([this] { run(); });
}

OverlappedAllreduce::~OverlappedAllreduce()
{
    for (std::size_t i = 0; i < m_accumulators.size(); ++i)
        m_accumulators[i]->del_post_hook(m_hookKeys[i]);
    {
        std::lock_guard lock(m_mutex);
        // A round that threw mid-backward leaves all-reduces its peers may
        // never join; only an abort ends them before the timeout.
        if (!m_queue.empty() || m_done < m_next)
            m_comm.abort();
        m_quit = true;
    }
    m_changed.notify_all();
    m_thread.join();
}

void OverlappedAllreduce::begin(std::function<void()> beforeStart)
{
    std::lock_guard lock(m_mutex);
    m_armed = true;
    m_beforeStart = std::move(beforeStart);
    for (std::size_t b = 0; b < m_buckets.size(); ++b)
        m_pending[b] = int(m_buckets[b].endParam - m_buckets[b].firstParam);
    m_next = 0;
    m_done = 0;
    m_startedEarly = 0;
    m_busyS = 0;
    m_error = nullptr;
}

void OverlappedAllreduce::gradientReady(std::size_t param)
{
    std::unique_lock lock(m_mutex);
    if (!m_armed)
        return;
    --m_pending[m_bucketOf[param]];
    // In index order only, and never the last bucket (see the class comment).
    while (m_next + 1 < m_buckets.size() && m_pending[m_next] <= 0) {
        if (m_beforeStart) {
            lock.unlock();
            m_beforeStart();
            lock.lock();
        }
        ++m_startedEarly;
        startLocked(m_next++);
    }
}

void OverlappedAllreduce::startLocked(std::size_t bucket)
{
    const GradientBucket &b = m_buckets[bucket];
    const bool last = bucket + 1 == m_buckets.size();
    m_queue.push_back(last ? m_store.narrow(0, 0, m_headSize + b.offset + b.size)
                           : m_store.narrow(0, m_headSize + b.offset, b.size));
    m_changed.notify_all();
}

OverlappedAllreduce::Result OverlappedAllreduce::finish()
{
    std::unique_lock lock(m_mutex);
    m_armed = false;
    m_beforeStart = nullptr;
    while (m_next < m_buckets.size())
        startLocked(m_next++);
    // Every all-reduce is bounded by the Comm's timeout and ends on abort.
    m_changed.wait(lock, [this] { return m_done == m_buckets.size(); });
    if (m_error)
        std::rethrow_exception(m_error);
    return {m_startedEarly, double(m_store.numel()) * sizeof(float), m_busyS};
}

void OverlappedAllreduce::run()
{
    std::unique_lock lock(m_mutex);
    for (;;) {
        m_changed.wait(lock, [this] { return m_quit || !m_queue.empty(); });
        if (m_queue.empty())
            return;
        torch::Tensor bucket = m_queue.front();
        m_queue.pop_front();
        // After a failed bucket the group is broken: the rest are not sent.
        if (!m_error) {
            lock.unlock();
            const auto started = std::chrono::steady_clock::now();
            std::exception_ptr error;
            try {
                m_comm.allreduceSum(bucket);
            } catch (...) {
                error = std::current_exception();
            }
            const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
            lock.lock();
            m_busyS += seconds;
            if (error)
                m_error = error;
        }
        ++m_done;
        m_changed.notify_all();
    }
}

} // namespace dlion::engine
