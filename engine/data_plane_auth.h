#pragma once

#include <QByteArray>
#include <QByteArrayView>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

// Authentication of the data plane between workers (torch-free).
//
// Every key derives from the run secret the agents share, bound to the
// group's rendezvous, so nothing of one generation is accepted in the
// next. The rendezvous store answers only clients that prove the key, and
// every message between workers carries a MAC under a key of its own
// direction, so a stranger on the network can neither join a group nor
// inject, replay or reflect a payload. Nothing is encrypted.
namespace dlion::engine::auth {

inline constexpr int kMacBytes = 16;
// Hand-started agents may hold a secret this short; shorter ones are refused.
inline constexpr int kMinSecretBytes = 16;

// HMAC-SHA256, truncated to kMacBytes, over the concatenated parts.
QByteArray mac(QByteArrayView key, std::initializer_list<QByteArrayView> parts);
bool equal(QByteArrayView a, QByteArrayView b);  // constant time
QByteArray groupKey(QByteArrayView secret, const std::string &rendezvous);
// The key of the messages `from` sends `to`.
QByteArray linkKey(QByteArrayView groupKey, int from, int to);
// A 64-bit word as 8 big-endian bytes, for MAC input.
QByteArray word(std::int64_t v);
// Whether the n-th rejection (from 1) is logged: the first few name their
// source, a flood is only counted.
inline bool worthLogging(int n) { return n <= 10 || n % 1000 == 0; }

// The rendezvous store: a key-value table the ranks of one group use to
// find each other (c10d::Store semantics). Its wire: the server sends a
// fresh nonce; each side then sends frames `length u32 | body | MAC`, the
// MAC over a per-direction sequence number and the body, under a key
// derived from the group key and the nonce. A connection that sends one
// frame that fails, is oversized, or does not prove itself within the
// handshake deadline is closed and counted.
class StoreServer {
public:
    struct Limits {
        int maxConnections = 256;
        int maxUnauthenticated = 16;
        std::chrono::milliseconds handshake{5000};
        std::uint32_t maxFrame = 1u << 20;
    };
    // Binds host:port (port 0: any free one); throws std::runtime_error.
    StoreServer(const std::string &host, int port, QByteArray groupKey, Limits limits);
    StoreServer(const std::string &host, int port, QByteArray groupKey) : StoreServer(host, port, std::move(groupKey), Limits{}) {}
    ~StoreServer();
    StoreServer(const StoreServer &) = delete;
    StoreServer &operator=(const StoreServer &) = delete;

    int port() const { return m_port; }
    // Connections closed because they did not authenticate.
    int rejected() const { return m_rejected; }

    struct State;

private:
    void run();

    int m_listenFd = -1;
    int m_wakeFds[2] = {-1, -1};
    int m_port = 0;
    std::atomic<int> m_rejected{0};
    std::unique_ptr<State> m_state;
    std::thread m_thread;
};

// One client of a StoreServer; every call is bounded by `timeout` and
// throws std::runtime_error on failure. Thread-safe.
class StoreClient {
public:
    StoreClient(const std::string &host, int port, QByteArray groupKey, std::chrono::milliseconds timeout);
    ~StoreClient();
    StoreClient(const StoreClient &) = delete;
    StoreClient &operator=(const StoreClient &) = delete;

    void setTimeout(std::chrono::milliseconds timeout);
    void set(const std::string &key, const std::vector<std::uint8_t> &value);
    std::optional<std::vector<std::uint8_t>> tryGet(const std::string &key);
    std::int64_t add(const std::string &key, std::int64_t delta);
    bool check(const std::vector<std::string> &keys);
    bool remove(const std::string &key);
    std::int64_t size();
    // Polls until every key is set; throws when `timeout` passes.
    void wait(const std::vector<std::string> &keys, std::chrono::milliseconds timeout);

    struct Channel;

private:
    QByteArray call(const QByteArray &request);

    int m_fd = -1;
    std::chrono::milliseconds m_timeout;
    std::unique_ptr<Channel> m_channel;
    std::mutex m_mutex;
};

} // namespace dlion::engine::auth
