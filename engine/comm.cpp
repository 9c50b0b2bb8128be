#include "comm.h"

#include "engine_error.h"

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <mutex>
#include <vector>

namespace dlion::engine {

namespace {
struct Group {
    c10::intrusive_ptr<c10d::Store> store;
    c10::intrusive_ptr<c10d::ProcessGroupGloo> pg;
};

// c10d hands out intrusive pointers; a shared_ptr that owns one keeps the
// header free of c10 types.
std::shared_ptr<c10d::Work> share(c10::intrusive_ptr<c10d::Work> work)
{
    c10d::Work *raw = work.get();
    return std::shared_ptr<c10d::Work>(raw, [keep = std::move(work)](c10d::Work *) mutable { keep.reset(); });
}

GroupBrokenError broken(const char *what, const std::string &why)
{
    return GroupBrokenError(std::string(what) + " failed: a peer worker is unreachable or stopped (" + why + ")");
}
} // namespace

// Shared with Requests so an abort reaches whichever wait is in progress.
struct Comm::State {
    std::chrono::milliseconds timeout{0};
    std::mutex mutex;
    bool aborted = false;
    // Gloo can abort only point-to-point work; a round waits on several
    // (one receive per peer, each on its own thread), and all must end.
    std::vector<c10d::Work *> waitingP2p;
};

Comm::Comm(const Options &o) : m_rank(o.rank), m_world(o.world), m_state(std::make_shared<State>())
{
    m_state->timeout = o.timeout;
    if (m_world == 1)
        return;
    auto group = std::make_shared<Group>();
    try {
        c10d::TCPStoreOptions so;
        so.port = std::uint16_t(o.rendezvousPort);
        so.isServer = o.rank == 0;
        so.numWorkers = std::size_t(o.world);
        so.waitWorkers = true;
        so.timeout = o.timeout;
        group->store = c10::make_intrusive<c10d::TCPStore>(o.rendezvousHost, so);
        auto opts = c10d::ProcessGroupGloo::Options::create(o.timeout);
        opts->devices.push_back(o.localHost.empty() ? c10d::ProcessGroupGloo::createDefaultDevice()
                                                    : c10d::ProcessGroupGloo::createDeviceForHostname(o.localHost));
        opts->threads = 1;
        group->pg = c10::make_intrusive<c10d::ProcessGroupGloo>(group->store, o.rank, o.world, opts);
    } catch (const std::exception &e) {
        throw GroupBrokenError("rendezvous at " + o.rendezvousHost + ":" + std::to_string(o.rendezvousPort) + " as rank "
                               + std::to_string(o.rank) + " of " + std::to_string(o.world)
                               + " failed: check that every worker can reach it (" + e.what() + ")");
    }
    m_group = group->pg.get();
    m_keepAlive = group;
}

Comm::~Comm() = default;

void Comm::abort()
{
    std::lock_guard lock(m_state->mutex);
    m_state->aborted = true;
    for (c10d::Work *w : m_state->waitingP2p)
        w->abort();
}

std::thread Comm::release()
{
    abort();
    m_group = nullptr;
    return std::thread([keep = std::move(m_keepAlive)]() mutable { keep.reset(); });
}

// Collectives run on Gloo's thread; waiting in slices lets an abort end
// the wait without touching the operation.
void Comm::waitCollective(const std::shared_ptr<c10d::Work> &work, const char *what)
{
    using Clock = std::chrono::steady_clock;
    const auto deadline = Clock::now() + m_state->timeout;
    for (;;) {
        try {
            work->wait(std::chrono::milliseconds(50));
            return;
        } catch (const std::exception &) {
            // Either the slice ran out or the work failed; a completed work
            // tells which by waiting once more.
            if (work->isCompleted()) {
                try {
                    work->wait();
                    return;
                } catch (const std::exception &e) {
                    throw broken(what, e.what());
                }
            }
        }
        if (std::lock_guard lock(m_state->mutex); m_state->aborted)
            throw GroupBrokenError(std::string(what) + " abandoned: the group is re-forming");
        if (Clock::now() >= deadline)
            throw broken(what, "timed out after " + std::to_string(m_state->timeout.count() / 1000) + " s");
    }
}

void Comm::allreduceSum(torch::Tensor &t)
{
    if (!m_group)
        return;
    std::vector<torch::Tensor> v{t};
    waitCollective(share(m_group->allreduce(v)), "all-reduce");
}

void Comm::broadcast(torch::Tensor &t, int root)
{
    if (!m_group)
        return;
    std::vector<torch::Tensor> v{t};
    c10d::BroadcastOptions bo;
    bo.rootRank = root;
    waitCollective(share(m_group->broadcast(v, bo)), "broadcast");
}

// Point-to-point work waits in Gloo itself (a timed-out wait poisons the
// whole context, so no slicing); abort() reaches it through State.
void Comm::Request::wait() const
{
    if (!m_work)
        return;
    {
        std::lock_guard lock(m_state->mutex);
        if (m_state->aborted)
            throw GroupBrokenError("point-to-point transfer abandoned: the group is re-forming");
        m_state->waitingP2p.push_back(m_work.get());
    }
    bool completed = false;
    std::string why = "aborted: the group is re-forming";
    try {
        completed = m_work->wait(m_state->timeout);
    } catch (const std::exception &e) {
        why = e.what();
    }
    std::lock_guard lock(m_state->mutex);
    auto &waiting = m_state->waitingP2p;
    waiting.erase(std::find(waiting.begin(), waiting.end(), m_work.get()));
    if (!completed)
        throw broken("point-to-point transfer", why);
}

template <typename Start>
Comm::Request Comm::request(torch::Tensor &t, Start start)
{
    Request r;
    r.m_state = m_state;
    if (m_group) {
        std::vector<torch::Tensor> v{t};
        // Gloo refuses to start a transfer on a pair an earlier timeout closed.
        try {
            r.m_work = share(start(v));
        } catch (const std::exception &e) {
            throw broken("point-to-point transfer", e.what());
        }
    }
    return r;
}

Comm::Request Comm::isend(torch::Tensor &t, int dst, int tag)
{
    return request(t, [&](std::vector<torch::Tensor> &v) { return m_group->send(v, dst, tag); });
}

Comm::Request Comm::irecv(torch::Tensor &t, int src, int tag)
{
    return request(t, [&](std::vector<torch::Tensor> &v) { return m_group->recv(v, src, tag); });
}

} // namespace dlion::engine
