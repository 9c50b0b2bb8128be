#pragma once

#include <torch/types.h>

#include <chrono>
#include <memory>
#include <string>

namespace c10d {
class ProcessGroupGloo;
class Work;
} // namespace c10d

namespace dlion::engine {

// The data plane between workers: a c10d ProcessGroupGloo joined through a
// TCPStore rendezvous that rank 0 hosts. Every operation is bounded by the
// timeout; a lost peer surfaces as an EngineError, never as a hang. With a
// world of 1 every collective is a no-op.
class Comm {
public:
    struct Options {
        std::string rendezvousHost = "127.0.0.1";
        int rendezvousPort = 0;
        std::string localHost = "127.0.0.1";  // interface Gloo binds to; empty = default
        int rank = 0;
        int world = 1;
        std::chrono::milliseconds timeout{60000};
    };

    explicit Comm(const Options &options);
    ~Comm();

    int rank() const { return m_rank; }
    int world() const { return m_world; }

    void allreduceSum(torch::Tensor &t);
    void broadcast(torch::Tensor &t, int root);
    // Point-to-point; `tag` must match on both ends.
    void send(torch::Tensor &t, int dst, int tag);
    void recv(torch::Tensor &t, int src, int tag);

    // Non-blocking point-to-point. The tensor must stay alive until the
    // request completes.
    class Request {
    public:
        Request() = default;
        bool done() const;
        void wait() const;  // throws EngineError after the timeout
    private:
        friend class Comm;
        std::shared_ptr<c10d::Work> m_work;
        std::chrono::milliseconds m_timeout{0};
    };
    Request isend(torch::Tensor &t, int dst, int tag);
    Request irecv(torch::Tensor &t, int src, int tag);

private:
    template <typename Start>
    Request request(torch::Tensor &t, Start start);

    int m_rank;
    int m_world;
    std::chrono::milliseconds m_timeout;
    std::shared_ptr<void> m_keepAlive;  // store + group (c10 intrusive pointers)
    c10d::ProcessGroupGloo *m_group = nullptr;
};

} // namespace dlion::engine
