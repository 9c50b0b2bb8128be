#include "comm.h"

#include "authenticated_store.h"
#include "engine_error.h"

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <handshake.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

namespace dlion::engine {

namespace {
const std::string kNonceKey = "dlion/nonce";

// Destroyed in reverse: the group, then the store client, then the server.
struct Group {
    std::unique_ptr<auth::StoreServer> server;
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

Comm::Comm(const Options &o)
    : m_options(o), m_rank(o.rank), m_world(o.world), m_state(std::make_shared<State>()),
      m_groupKey(auth::groupKey(o.secret, o.rendezvousHost + ":" + std::to_string(o.rendezvousPort)))
{
    m_state->timeout = o.timeout;
}

bool Comm::aborted() const
{
    std::lock_guard lock(m_state->mutex);
    return m_state->aborted;
}

// Rendezvous steps (each store call is bounded by kRendezvousSlice) run
// with abort and deadline checks in between, so a superseded generation is
// left within a slice, whatever order the plan reaches the workers in.
void Comm::connect()
{
    using Clock = std::chrono::steady_clock;
    constexpr auto kRendezvousSlice = std::chrono::milliseconds(1000);
    const Options &o = m_options;
    const std::string where = "rendezvous at " + o.rendezvousHost + ":" + std::to_string(o.rendezvousPort) + " as rank "
        + std::to_string(o.rank) + " of " + std::to_string(o.world);
    auto fail = [&](const std::string &why) { return GroupBrokenError(where + " failed: " + why); };
    if (m_world == 1) {
        m_connected = true;
        return;
    }
    const auto deadline = Clock::now() + o.timeout;
    auto checkTime = [&](const std::string &what) {
        if (aborted())
            throw GroupBrokenError(where + " abandoned: a newer group plan superseded it");
        if (Clock::now() >= deadline)
            throw fail(what + " within " + std::to_string(o.timeout.count() / 1000) + " s");
    };
    if (o.secret.size() < auth::kMinSecretBytes)
        throw EngineError(where + " refused: the data plane needs the run secret (at least "
                          + std::to_string(auth::kMinSecretBytes) + " bytes) to authenticate its peers");
    auto group = std::make_shared<Group>();
    if (o.rank == 0) {
        // Only on this worker's own address: the rendezvous is no business
        // of the other interfaces.
        const std::string bindHost = o.localHost.empty() ? o.rendezvousHost : o.localHost;
        try {
            group->server = std::make_unique<auth::StoreServer>(bindHost, o.rendezvousPort, m_groupKey);
        } catch (const std::exception &e) {
            // The host cannot listen (port taken): only a new plan helps.
            throw fail(std::string("cannot host the rendezvous (") + e.what() + ")");
        }
    }
    for (;;) {
        try {
            group->store = c10::make_intrusive<AuthenticatedStore>(o.rendezvousHost, o.rendezvousPort, m_groupKey, kRendezvousSlice);
            break;
        } catch (const std::exception &e) {
            checkTime(std::string("could not reach the rendezvous host (") + e.what() + ")");
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
        }
    }
    // Every store call is bounded by its slice, so the barrier can check
    // for an abort and the deadline between calls.
    try {
        const std::string joined = "dlion/joined";
        if (o.rank == 0) {
            const QByteArray nonce = protocol::handshake::makeNonce();
            group->store->set(kNonceKey, std::vector<std::uint8_t>(nonce.begin(), nonce.end()));
        }
        group->store->add(joined, 1);
        while (group->store->add(joined, 0) < o.world) {
            checkTime("not every worker arrived");
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
    } catch (const GroupBrokenError &) {
        throw;
    } catch (const std::exception &e) {
        throw fail("check that every worker can reach it (" + std::string(e.what()) + ")");
    }
    try {
        group->store->setTimeout(o.timeout);
        auto opts = c10d::ProcessGroupGloo::Options::create(o.timeout);
        opts->devices.push_back(o.localHost.empty() ? c10d::ProcessGroupGloo::createDefaultDevice()
                                                    : c10d::ProcessGroupGloo::createDeviceForHostname(o.localHost));
        opts->threads = 1;
        group->pg = c10::make_intrusive<c10d::ProcessGroupGloo>(group->store, o.rank, o.world, opts);
    } catch (const GroupBrokenError &) {
        throw;
    } catch (const std::exception &e) {
        throw fail(std::string("check that every worker can reach it (") + e.what() + ")");
    }
    m_group = group->pg.get();
    m_keepAlive = group;
    provePairs(group->store->get(kNonceKey), fail);
    m_connected = true;
}

// Gloo takes the first connection to a pair's listening socket during the
// rendezvous. Every worker proves on each pair that it holds this group's
// link key (over a nonce from the authenticated store), so a stranger who
// reached a pair breaks the rendezvous instead of joining the group's sums.
void Comm::provePairs(const std::vector<std::uint8_t> &nonce, const std::function<GroupBrokenError(const std::string &)> &fail)
{
    const QByteArrayView fresh(reinterpret_cast<const char *>(nonce.data()), qsizetype(nonce.size()));
    auto proof = [&](int from, int to) { return auth::mac(auth::linkKey(m_groupKey, from, to), {"dlion gloo pair", fresh}); };
    std::vector<torch::Tensor> sent, received;
    std::vector<Request> requests;
    for (int j = 0; j < m_world; ++j) {
        if (j == m_rank)
            continue;
        sent.push_back(torch::empty({kPairProofWords}, torch::kInt));
        std::memcpy(sent.back().data_ptr(), proof(m_rank, j).constData(), auth::kMacBytes);
        received.push_back(torch::zeros({kPairProofWords}, torch::kInt));
        requests.push_back(isend(sent.back(), j, kTagPairProof));
        requests.push_back(irecv(received.back(), j, kTagPairProof));
    }
    try {
        for (const Request &r : requests)
            r.wait();
    } catch (const GroupBrokenError &e) {
        throw fail(std::string("a peer did not prove it holds the run secret on its Gloo link (") + e.what() + ")");
    }
    for (int j = 0, k = 0; j < m_world; ++j) {
        if (j == m_rank)
            continue;
        const QByteArrayView got(static_cast<const char *>(received[std::size_t(k++)].data_ptr()), auth::kMacBytes);
        if (!auth::equal(got, proof(j, m_rank)))
            throw fail("worker rank " + std::to_string(j)
                       + " did not prove it holds the run secret on its Gloo link: a stranger may have connected in its place");
    }
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

void Comm::paceUntil(std::chrono::steady_clock::time_point start, double seconds, const char *what)
{
    using Clock = std::chrono::steady_clock;
    const auto until = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    while (Clock::now() < until) {
        if (aborted())
            throw GroupBrokenError(std::string(what) + " abandoned: the group is re-forming");
        std::this_thread::sleep_until(std::min(until, Clock::now() + std::chrono::milliseconds(50)));
    }
}

void Comm::allreduceSum(torch::Tensor &t, Pace pace)
{
    if (!m_group)
        return;
    std::vector<torch::Tensor> v{t};
    waitCollective(share(m_group->allreduce(v)), "all-reduce");
    // Emulated, it starts when the last rank arrives, which on loopback is
    // about when it completes: every rank then leaves at the same time.
    if (m_pacing.allreduce && pace == Pace::Emulated)
        paceUntil(std::chrono::steady_clock::now(), m_pacing.allreduce(double(t.numel() * t.element_size())), "all-reduce");
}

void Comm::broadcast(torch::Tensor &t, int root, const std::vector<int> &receivers)
{
    if (!m_group)
        return;
    std::vector<torch::Tensor> v{t};
    c10d::BroadcastOptions bo;
    bo.rootRank = root;
    waitCollective(share(m_group->broadcast(v, bo)), "broadcast");
    if (m_pacing.broadcast)
        paceUntil(std::chrono::steady_clock::now(), m_pacing.broadcast(root, receivers, double(t.numel() * t.element_size())),
                  "broadcast");
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
