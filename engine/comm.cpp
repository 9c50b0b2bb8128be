#include "comm.h"

#include "engine_error.h"

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

namespace dlion::engine {

namespace {
struct Group {
    c10::intrusive_ptr<c10d::Store> store;
    c10::intrusive_ptr<c10d::ProcessGroupGloo> pg;
};

void waitOn(const c10::intrusive_ptr<c10d::Work> &work, std::chrono::milliseconds timeout, const char *what)
{
    try {
        work->wait(timeout);
    } catch (const std::exception &e) {
        throw EngineError(std::string(what) + " failed: a peer worker is unreachable or stopped (" + e.what() + ")");
    }
}
} // namespace

Comm::Comm(const Options &o) : m_rank(o.rank), m_world(o.world), m_timeout(o.timeout)
{
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
        throw EngineError("rendezvous at " + o.rendezvousHost + ":" + std::to_string(o.rendezvousPort) + " as rank "
                          + std::to_string(o.rank) + " of " + std::to_string(o.world)
                          + " failed: check that every worker can reach it (" + e.what() + ")");
    }
    m_group = group->pg.get();
    m_keepAlive = group;
}

Comm::~Comm() = default;

void Comm::allreduceSum(torch::Tensor &t)
{
    if (!m_group)
        return;
    std::vector<torch::Tensor> v{t};
    waitOn(m_group->allreduce(v), m_timeout, "all-reduce");
}

void Comm::broadcast(torch::Tensor &t, int root)
{
    if (!m_group)
        return;
    std::vector<torch::Tensor> v{t};
    c10d::BroadcastOptions bo;
    bo.rootRank = root;
    waitOn(m_group->broadcast(v, bo), m_timeout, "broadcast");
}

void Comm::send(torch::Tensor &t, int dst, int tag)
{
    if (!m_group)
        return;
    std::vector<torch::Tensor> v{t};
    waitOn(m_group->send(v, dst, tag), m_timeout, "send");
}

namespace {
// c10d hands out intrusive pointers; a shared_ptr that owns one keeps the
// header free of c10 types.
std::shared_ptr<c10d::Work> share(c10::intrusive_ptr<c10d::Work> work)
{
    c10d::Work *raw = work.get();
    return std::shared_ptr<c10d::Work>(raw, [keep = std::move(work)](c10d::Work *) mutable { keep.reset(); });
}
} // namespace

bool Comm::Request::done() const
{
    return !m_work || m_work->isCompleted();
}

void Comm::Request::wait() const
{
    if (!m_work)
        return;
    try {
        m_work->wait(m_timeout);
    } catch (const std::exception &e) {
        throw EngineError(std::string("point-to-point transfer failed: a peer worker is unreachable or stopped (") + e.what() + ")");
    }
}

template <typename Start>
Comm::Request Comm::request(torch::Tensor &t, Start start)
{
    Request r;
    r.m_timeout = m_timeout;
    if (m_group) {
        std::vector<torch::Tensor> v{t};
        r.m_work = share(start(v));
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

void Comm::recv(torch::Tensor &t, int src, int tag)
{
    if (!m_group)
        return;
    std::vector<torch::Tensor> v{t};
    waitOn(m_group->recv(v, src, tag), m_timeout, "receive");
}

} // namespace dlion::engine
