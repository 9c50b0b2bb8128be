#pragma once

#include "engine_error.h"

#include <torch/types.h>

#include <QByteArray>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace c10d {
class ProcessGroupGloo;
class Work;
} // namespace c10d

namespace dlion::engine {

// The data plane between workers: a c10d ProcessGroupGloo joined through an
// authenticated rendezvous store that rank 0 hosts (data_plane_auth.h). Every operation is bounded by the
// timeout, and abort() ends any wait early, the rendezvous included; a lost
// peer or a rendezvous that cannot form surfaces as a GroupBrokenError,
// never as a hang. With a world of 1 every collective is a no-op.
class Comm {
public:
    struct Options {
        std::string rendezvousHost = "127.0.0.1";
        int rendezvousPort = 0;
        std::string localHost = "127.0.0.1";  // interface Gloo binds to; empty = default
        int rank = 0;
        int world = 1;
        std::chrono::milliseconds timeout{60000};
        // The run secret the agents share: only its holders join the group.
        QByteArray secret;
    };

    // Does not touch the network: register the Comm where abort() can
    // reach it, then connect().
    explicit Comm(const Options &options);
    ~Comm();

    // The rendezvous: connects to (or, as rank 0, hosts) the store, waits
    // until every rank has arrived, then forms the Gloo group. Throws
    // GroupBrokenError on a timeout, a port rank 0 cannot listen on, or
    // an abort.
    void connect();
    bool connected() const { return m_connected; }

    int rank() const { return m_rank; }
    int world() const { return m_world; }
    // The key this group's messages are authenticated under.
    const QByteArray &groupKey() const { return m_groupKey; }

    // Thread-safe: makes the current and every later wait throw
    // GroupBrokenError, so a worker stuck on a dead peer can regroup.
    void abort();
    // Hands the group to a thread that destroys it: Gloo joins its threads
    // only when their operations end, which for a broken group means its
    // own timeout. Join the thread before the process exits.
    std::thread release();

    // How long collectives take on the emulated links (seconds, from the
    // moment the last rank arrives): the network's part, computed by the
    // link emulator. Without pacing, collectives take what loopback takes.
    struct Pacing {
        std::function<double(double bytes)> allreduce;
        std::function<double(int root, const std::vector<int> &receivers, double bytes)> broadcast;
    };
    void setPacing(Pacing pacing) { m_pacing = std::move(pacing); }

    // Pace::Free: a measurement the experimenter makes (evaluation), which no
    // strategy's time may be charged with.
    enum class Pace { Emulated, Free };
    void allreduceSum(torch::Tensor &t, Pace pace = Pace::Emulated);
    // `receivers`: the ranks that need the data, which are all the pacing
    // waits for (empty: every rank).
    void broadcast(torch::Tensor &t, int root, const std::vector<int> &receivers = {});

    struct State;

    // The pair proof's tag and size (int32 words) on the wire.
    static constexpr int kTagPairProof = 1;
    static constexpr std::int64_t kPairProofWords = 4;

    // Non-blocking point-to-point; `tag` must match on both ends. The tensor
    // must stay alive until the request completes.
    class Request {
    public:
        Request() = default;
        void wait() const;  // throws GroupBrokenError after the timeout or an abort
        bool sent() const { return m_work != nullptr; }  // a transfer was started
    private:
        friend class Comm;
        std::shared_ptr<c10d::Work> m_work;
        std::shared_ptr<State> m_state;
    };
    Request isend(torch::Tensor &t, int dst, int tag);
    Request irecv(torch::Tensor &t, int src, int tag);

private:
    template <typename Start>
    Request request(torch::Tensor &t, Start start);
    void waitCollective(const std::shared_ptr<c10d::Work> &work, const char *what);
    bool aborted() const;
    void provePairs(const std::vector<std::uint8_t> &nonce, const std::function<GroupBrokenError(const std::string &)> &fail);
    // Waits until `seconds` after `start`; an abort ends the wait.
    void paceUntil(std::chrono::steady_clock::time_point start, double seconds, const char *what);

    Options m_options;
    std::atomic<bool> m_connected{false};
    Pacing m_pacing;

    int m_rank;
    int m_world;
    std::shared_ptr<State> m_state;
    QByteArray m_groupKey;
    std::shared_ptr<void> m_keepAlive;  // store + group (c10 intrusive pointers)
    c10d::ProcessGroupGloo *m_group = nullptr;
};

} // namespace dlion::engine
