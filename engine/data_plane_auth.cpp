#include "data_plane_auth.h"

#include "engine_log.h"

#include <handshake.h>

#include <QtEndian>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <stdexcept>

#include <arpa/inet.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace dlion::engine::auth {

// OpenSSL, not QMessageAuthenticationCode: payloads are MiBs per round, and
// OpenSSL's SHA-256 uses the CPU's SHA extensions where Qt's is portable C.
QByteArray mac(QByteArrayView key, std::initializer_list<QByteArrayView> parts)
{
    static EVP_MAC *const hmac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
    std::unique_ptr<EVP_MAC_CTX, decltype(&EVP_MAC_CTX_free)> ctx(EVP_MAC_CTX_new(hmac), EVP_MAC_CTX_free);
    char digest[] = "SHA256";
    const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string("digest", digest, 0), OSSL_PARAM_construct_end()};
    unsigned char out[EVP_MAX_MD_SIZE];
    std::size_t length = 0;
    bool ok = ctx && EVP_MAC_init(ctx.get(), reinterpret_cast<const unsigned char *>(key.data()), std::size_t(key.size()), params);
    for (QByteArrayView part : parts)
        ok = ok && EVP_MAC_update(ctx.get(), reinterpret_cast<const unsigned char *>(part.data()), std::size_t(part.size()));
    if (!(ok && EVP_MAC_final(ctx.get(), out, &length, sizeof out)))
        throw std::runtime_error("OpenSSL cannot compute an HMAC-SHA256");
    return QByteArray(reinterpret_cast<const char *>(out), kMacBytes);
}

bool equal(QByteArrayView a, QByteArrayView b)
{
    return protocol::handshake::equal(a.toByteArray(), b.toByteArray());
}

QByteArray word(std::int64_t v)
{
    QByteArray bytes(8, Qt::Uninitialized);
    qToBigEndian(v, bytes.data());
    return bytes;
}

QByteArray groupKey(QByteArrayView secret, const std::string &rendezvous)
{
    return mac(secret, {"dlion data plane", QByteArrayView(rendezvous.data(), qsizetype(rendezvous.size()))});
}

QByteArray linkKey(QByteArrayView groupKey, int from, int to)
{
    return mac(groupKey, {"dlion link", word(from), word(to)});
}

namespace {
using Clock = std::chrono::steady_clock;
constexpr int kNonceBytes = protocol::handshake::kNonceSize;
constexpr int kLengthBytes = 4;
constexpr std::uint32_t kMaxReply = 1u << 20;
constexpr std::uint32_t kMaxFirstFrame = 4096;

enum class Op : char { Set = 1, Get, Add, Check, Remove, Size };

std::runtime_error systemError(const std::string &what)
{
    return std::runtime_error(what + ": " + std::strerror(errno));
}

QByteArrayView view(const std::string &s)
{
    return QByteArrayView(s.data(), qsizetype(s.size()));
}

// Fields of a request or reply: a 4-byte big-endian length, then the bytes.
void appendField(QByteArray &to, QByteArrayView field)
{
    char length[kLengthBytes];
    qToBigEndian(std::uint32_t(field.size()), length);
    to.append(length, kLengthBytes);
    to.append(field);
}

std::optional<std::vector<QByteArray>> splitFields(QByteArrayView data)
{
    std::vector<QByteArray> fields;
    while (!data.isEmpty()) {
        if (data.size() < kLengthBytes)
            return std::nullopt;
        const auto length = qFromBigEndian<std::uint32_t>(data.data());
        data = data.sliced(kLengthBytes);
        if (length > std::uint32_t(data.size()))
            return std::nullopt;
        fields.push_back(data.first(length).toByteArray());
        data = data.sliced(length);
    }
    return fields;
}

std::int64_t readWord(QByteArrayView bytes)
{
    return bytes.size() == 8 ? qFromBigEndian<std::int64_t>(bytes.data()) : 0;
}
} // namespace

// Sequenced frames, each direction under its own key (so a frame sent back
// to its sender fails), both derived from the server's fresh nonce (so a
// recorded connection cannot be replayed on another).
struct StoreClient::Channel {
    QByteArray sendKey, recvKey;
    std::int64_t sendSeq = 0, recvSeq = 0;

    Channel(QByteArrayView groupKey, QByteArrayView nonce, bool server)
    {
        const QByteArray up = mac(groupKey, {"dlion store client", nonce});
        const QByteArray down = mac(groupKey, {"dlion store server", nonce});
        sendKey = server ? down : up;
        recvKey = server ? up : down;
    }

    QByteArray seal(const QByteArray &body)
    {
        QByteArray frame;
        appendField(frame, body);
        frame += mac(sendKey, {word(sendSeq++), body});
        return frame;
    }

    enum class Opened { Incomplete, Ok, Bad };
    // Takes the first frame off `buffer`.
    Opened open(QByteArray &buffer, std::uint32_t maxFrame, QByteArray *body)
    {
        if (buffer.size() < kLengthBytes)
            return Opened::Incomplete;
        const auto length = qFromBigEndian<std::uint32_t>(buffer.constData());
        if (length > maxFrame)
            return Opened::Bad;
        if (buffer.size() < kLengthBytes + qsizetype(length) + kMacBytes)
            return Opened::Incomplete;
        *body = buffer.mid(kLengthBytes, length);
        const QByteArrayView tag = QByteArrayView(buffer).sliced(kLengthBytes + length, kMacBytes);
        if (!equal(tag, mac(recvKey, {word(recvSeq), *body})))
            return Opened::Bad;
        ++recvSeq;
        buffer.remove(0, kLengthBytes + length + kMacBytes);
        return Opened::Ok;
    }
};

// ---- server ----

struct StoreServer::State {
    struct Connection {
        int fd = -1;
        std::string peer;
        QByteArray nonce;
        StoreClient::Channel channel;
        QByteArray buffer;
        bool proven = false;
        Clock::time_point since;
    };

    QByteArray key;
    Limits limits;
    std::map<std::string, QByteArray> table;
    std::vector<Connection> connections;
    Clock::time_point acceptPausedUntil;

    QByteArray answer(const QByteArray &request, bool *ok)
    {
        *ok = false;
        if (request.isEmpty())
            return {};
        const auto fields = splitFields(QByteArrayView(request).sliced(1));
        if (!fields)
            return {};
        const auto &f = *fields;
        auto keyOf = [&](std::size_t i) { return f[i].toStdString(); };
        QByteArray reply;
        switch (Op(request[0])) {
        case Op::Set:
            if (f.size() != 2)
                return {};
            table[keyOf(0)] = f[1];
            break;
        case Op::Get: {
            if (f.size() != 1)
                return {};
            const auto it = table.find(keyOf(0));
            appendField(reply, it == table.end() ? QByteArray() : QByteArray(1, '\1'));
            appendField(reply, it == table.end() ? QByteArray() : it->second);
            break;
        }
        case Op::Add: {
            if (f.size() != 2)
                return {};
            // Counters are stored as decimal text, as c10d's TCPStore does.
            QByteArray &value = table[keyOf(0)];
            const std::int64_t sum = value.toLongLong() + readWord(f[1]);
            value = QByteArray::number(qlonglong(sum));
            appendField(reply, word(sum));
            break;
        }
        case Op::Check: {
            const bool all = std::all_of(f.begin(), f.end(), [&](const QByteArray &k) { return table.count(k.toStdString()) > 0; });
            appendField(reply, QByteArray(1, all ? '\1' : '\0'));
            break;
        }
        case Op::Remove:
            if (f.size() != 1)
                return {};
            appendField(reply, QByteArray(1, table.erase(keyOf(0)) > 0 ? '\1' : '\0'));
            break;
        case Op::Size:
            appendField(reply, word(std::int64_t(table.size())));
            break;
        default:
            return {};
        }
        *ok = true;
        return reply;
    }
};

namespace {
int bindListener(const std::string &host, int port, int *boundPort)
{
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV | AI_PASSIVE;
    addrinfo *found = nullptr;
    const std::string service = std::to_string(port);
    if (const int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found); rc != 0)
        throw std::runtime_error("cannot resolve " + host + ": " + gai_strerror(rc));
    std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> keep(found, freeaddrinfo);
    const int fd = socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        throw systemError("cannot open a socket");
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, found->ai_addr, found->ai_addrlen) != 0 || listen(fd, 128) != 0) {
        const auto error = systemError("cannot listen on " + host + ":" + service);
        close(fd);
        throw error;
    }
    sockaddr_storage bound{};
    socklen_t length = sizeof bound;
    getsockname(fd, reinterpret_cast<sockaddr *>(&bound), &length);
    *boundPort = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6 *>(&bound)->sin6_port
                                                   : reinterpret_cast<sockaddr_in *>(&bound)->sin_port);
    return fd;
}

std::string peerName(const sockaddr_storage &a)
{
    char host[INET6_ADDRSTRLEN] = {};
    const bool v6 = a.ss_family == AF_INET6;
    const void *address = v6 ? static_cast<const void *>(&reinterpret_cast<const sockaddr_in6 &>(a).sin6_addr)
                             : static_cast<const void *>(&reinterpret_cast<const sockaddr_in &>(a).sin_addr);
    inet_ntop(a.ss_family, address, host, sizeof host);
    const int port = ntohs(v6 ? reinterpret_cast<const sockaddr_in6 &>(a).sin6_port : reinterpret_cast<const sockaddr_in &>(a).sin_port);
    return std::string(host) + ":" + std::to_string(port);
}

// Sends all of `data` now or reports failure: a client that lets its
// receive buffer fill is not one of ours.
bool sendNow(int fd, const QByteArray &data)
{
    return send(fd, data.constData(), std::size_t(data.size()), MSG_NOSIGNAL | MSG_DONTWAIT) == data.size();
}
} // namespace

StoreServer::StoreServer(const std::string &host, int port, QByteArray groupKey, Limits limits)
    : m_state(std::make_unique<State>())
{
    m_state->key = std::move(groupKey);
    m_state->limits = limits;
    m_listenFd = bindListener(host, port, &m_port);
    if (pipe2(m_wakeFds, O_CLOEXEC | O_NONBLOCK) != 0) {
        close(m_listenFd);
        throw systemError("cannot create a pipe");
    }
    m_thread = std::thread([this] { run(); });
}

StoreServer::~StoreServer()
{
    const char stop = 1;
    [[maybe_unused]] const auto written = write(m_wakeFds[1], &stop, 1);
    m_thread.join();
    for (const auto &c : m_state->connections)
        close(c.fd);
    close(m_listenFd);
    close(m_wakeFds[0]);
    close(m_wakeFds[1]);
}

void StoreServer::run()
{
    State &s = *m_state;
    auto reject = [&](const std::string &peer, const char *why) {
        const int n = ++m_rejected;
        if (worthLogging(n))
            qCWarning(lcEngine).noquote() << QStringLiteral("rendezvous store: rejected a connection from %1 (%2; %3 so far)")
                                                 .arg(QString::fromStdString(peer), QLatin1String(why))
                                                 .arg(n);
    };
    auto drop = [&](std::size_t i, const char *why) {
        if (why)
            reject(s.connections[i].peer, why);
        close(s.connections[i].fd);
        s.connections.erase(s.connections.begin() + std::ptrdiff_t(i));
    };
    auto accepting = [&] {
        for (;;) {
            sockaddr_storage from{};
            socklen_t length = sizeof from;
            const int fd = accept4(m_listenFd, reinterpret_cast<sockaddr *>(&from), &length, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (fd < 0) {
                // Out of descriptors: listen again a little later rather than spin.
                if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
                    s.acceptPausedUntil = Clock::now() + std::chrono::milliseconds(100);
                return;
            }
            // Past the limit the oldest unproven connection makes room: a
            // flood of silent ones cannot keep a key holder out, who proves
            // itself with its first request.
            const auto unproven = std::count_if(s.connections.begin(), s.connections.end(), [](const auto &c) { return !c.proven; });
            if (unproven >= s.limits.maxUnauthenticated) {
                const auto oldest = std::find_if(s.connections.begin(), s.connections.end(), [](const auto &c) { return !c.proven; });
                drop(std::size_t(oldest - s.connections.begin()), "too many unauthenticated connections");
            }
            if (int(s.connections.size()) >= s.limits.maxConnections) {
                reject(peerName(from), "too many connections");
                close(fd);
                continue;
            }
            const QByteArray nonce = protocol::handshake::makeNonce();
            if (!sendNow(fd, nonce)) {
                close(fd);
                continue;
            }
            s.connections.push_back({fd, peerName(from), nonce, StoreClient::Channel(s.key, nonce, true), {}, false, Clock::now()});
        }
    };
    for (;;) {
        const auto now = Clock::now();
        // Close the connections that have not proven themselves in time.
        for (std::size_t i = s.connections.size(); i-- > 0;) {
            if (!s.connections[i].proven && now - s.connections[i].since > s.limits.handshake)
                drop(i, "no valid request within the handshake deadline");
        }
        std::vector<pollfd> fds{{m_wakeFds[0], POLLIN, 0}, {now < s.acceptPausedUntil ? -1 : m_listenFd, POLLIN, 0}};
        for (const auto &c : s.connections)
            fds.push_back({c.fd, POLLIN, 0});
        if (poll(fds.data(), nfds_t(fds.size()), 100) < 0 && errno != EINTR)
            return;
        if (fds[0].revents)
            return;
        // Back to front, so dropping a connection leaves the earlier indices
        // valid; accepting, which may evict one, comes after.
        for (std::size_t k = fds.size(); k-- > 2;) {
            if (!fds[k].revents)
                continue;
            const std::size_t i = k - 2;
            auto &c = s.connections[i];
            char chunk[4096];
            const auto n = recv(c.fd, chunk, sizeof chunk, MSG_DONTWAIT);
            if (n <= 0) {
                if (n == 0 || (errno != EAGAIN && errno != EINTR))
                    drop(i, c.proven ? nullptr : "closed without authenticating");
                continue;
            }
            c.buffer.append(chunk, n);
            const char *why = nullptr;
            for (;;) {
                QByteArray request;
                // A stranger gets a few KiB, not a frame's worth of our memory.
                const auto opened = c.channel.open(c.buffer, c.proven ? s.limits.maxFrame : kMaxFirstFrame, &request);
                if (opened == StoreClient::Channel::Opened::Incomplete)
                    break;
                bool ok = false;
                const QByteArray reply = opened == StoreClient::Channel::Opened::Ok ? s.answer(request, &ok) : QByteArray();
                if (!ok) {
                    why = opened == StoreClient::Channel::Opened::Bad ? "a frame failed authentication (wrong run secret?)"
                                                                      : "malformed request";
                    break;
                }
                c.proven = true;
                if (!sendNow(c.fd, c.channel.seal(reply))) {
                    why = "does not read its replies";
                    break;
                }
            }
            if (why)
                drop(i, why);
        }
        if (fds[1].revents & POLLIN)
            accepting();
    }
}

// ---- client ----

namespace {
void waitFor(int fd, short events, Clock::time_point deadline, const std::string &what)
{
    for (;;) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
        if (left <= 0)
            throw std::runtime_error(what + ": timed out");
        pollfd p{fd, events, 0};
        const int rc = poll(&p, 1, int(std::min<long long>(left, 1000)));
        if (rc > 0)
            return;
        if (rc < 0 && errno != EINTR)
            throw systemError(what);
    }
}

// Moves n bytes with `step` (a recv or send of up to the count it is
// given), waiting for `events` between steps.
template <typename Step>
void transferAll(int fd, short events, std::size_t n, Clock::time_point deadline, const std::string &what, Step step)
{
    while (n > 0) {
        waitFor(fd, events, deadline, what);
        const auto moved = step(n);
        if (moved == 0)
            throw std::runtime_error(what + ": the store closed the connection (wrong run secret?)");
        if (moved < 0) {
            if (errno == EAGAIN || errno == EINTR)
                continue;
            throw systemError(what);
        }
        n -= std::size_t(moved);
    }
}

void readExactly(int fd, char *to, std::size_t n, Clock::time_point deadline, const std::string &what)
{
    transferAll(fd, POLLIN, n, deadline, what, [&](std::size_t left) {
        const auto got = recv(fd, to, left, MSG_DONTWAIT);
        to += std::max<ssize_t>(got, 0);
        return got;
    });
}

void writeAll(int fd, const QByteArray &data, Clock::time_point deadline, const std::string &what)
{
    const char *from = data.constData();
    transferAll(fd, POLLOUT, std::size_t(data.size()), deadline, what, [&](std::size_t left) {
        const auto sent = send(fd, from, left, MSG_NOSIGNAL | MSG_DONTWAIT);
        from += std::max<ssize_t>(sent, 0);
        return sent;
    });
}

int connectTo(const std::string &host, int port, Clock::time_point deadline)
{
    const std::string where = "rendezvous store at " + host + ":" + std::to_string(port);
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo *found = nullptr;
    if (const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); rc != 0)
        throw std::runtime_error(where + ": " + gai_strerror(rc));
    std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> keep(found, freeaddrinfo);
    const int fd = socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        throw systemError(where);
    try {
        if (connect(fd, found->ai_addr, found->ai_addrlen) != 0) {
            if (errno != EINPROGRESS)
                throw systemError(where);
            waitFor(fd, POLLOUT, deadline, where);
            int error = 0;
            socklen_t length = sizeof error;
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length);
            if (error != 0) {
                errno = error;
                throw systemError(where);
            }
        }
    } catch (...) {
        close(fd);
        throw;
    }
    return fd;
}
} // namespace

StoreClient::StoreClient(const std::string &host, int port, QByteArray groupKey, std::chrono::milliseconds timeout)
    : m_timeout(timeout)
{
    const auto deadline = Clock::now() + timeout;
    m_fd = connectTo(host, port, deadline);
    try {
        QByteArray nonce(kNonceBytes, Qt::Uninitialized);
        readExactly(m_fd, nonce.data(), kNonceBytes, deadline, "rendezvous store at " + host + ":" + std::to_string(port));
        m_channel = std::make_unique<Channel>(groupKey, nonce, false);
    } catch (...) {
        close(m_fd);
        throw;
    }
}

StoreClient::~StoreClient()
{
    close(m_fd);
}

void StoreClient::setTimeout(std::chrono::milliseconds timeout)
{
    std::lock_guard lock(m_mutex);
    m_timeout = timeout;
}

QByteArray StoreClient::call(const QByteArray &request)
{
    std::lock_guard lock(m_mutex);
    const std::string what = "rendezvous store request";
    const auto deadline = Clock::now() + m_timeout;
    writeAll(m_fd, m_channel->seal(request), deadline, what);
    QByteArray frame(kLengthBytes, Qt::Uninitialized);
    readExactly(m_fd, frame.data(), kLengthBytes, deadline, what);
    const auto length = qFromBigEndian<std::uint32_t>(frame.constData());
    if (length > kMaxReply)
        throw std::runtime_error(what + ": oversized reply");
    frame.resize(kLengthBytes + qsizetype(length) + kMacBytes);
    readExactly(m_fd, frame.data() + kLengthBytes, length + kMacBytes, deadline, what);
    QByteArray body;
    if (m_channel->open(frame, kMaxReply, &body) != Channel::Opened::Ok)
        throw std::runtime_error(what + ": a reply failed authentication");
    return body;
}

namespace {
QByteArray request(Op op, std::initializer_list<QByteArrayView> fields)
{
    QByteArray r(1, char(op));
    for (QByteArrayView f : fields)
        appendField(r, f);
    return r;
}

std::vector<QByteArray> fieldsOf(const QByteArray &reply, std::size_t expected)
{
    auto fields = splitFields(reply);
    if (!fields || fields->size() != expected)
        throw std::runtime_error("rendezvous store: malformed reply");
    return *fields;
}
} // namespace

void StoreClient::set(const std::string &key, const std::vector<std::uint8_t> &value)
{
    call(request(Op::Set, {view(key), QByteArrayView(value.data(), qsizetype(value.size()))}));
}

std::optional<std::vector<std::uint8_t>> StoreClient::tryGet(const std::string &key)
{
    const auto f = fieldsOf(call(request(Op::Get, {view(key)})), 2);
    if (f[0].isEmpty())
        return std::nullopt;
    return std::vector<std::uint8_t>(f[1].begin(), f[1].end());
}

std::int64_t StoreClient::add(const std::string &key, std::int64_t delta)
{
    return readWord(fieldsOf(call(request(Op::Add, {view(key), word(delta)})), 1)[0]);
}

bool StoreClient::check(const std::vector<std::string> &keys)
{
    QByteArray r(1, char(Op::Check));
    for (const auto &k : keys)
        appendField(r, view(k));
    return fieldsOf(call(r), 1)[0] == "\1";
}

bool StoreClient::remove(const std::string &key)
{
    return fieldsOf(call(request(Op::Remove, {view(key)})), 1)[0] == "\1";
}

std::int64_t StoreClient::size()
{
    return readWord(fieldsOf(call(request(Op::Size, {})), 1)[0]);
}

void StoreClient::wait(const std::vector<std::string> &keys, std::chrono::milliseconds timeout)
{
    const auto deadline = Clock::now() + timeout;
    while (!check(keys)) {
        if (Clock::now() >= deadline)
            throw std::runtime_error("rendezvous store: timed out after " + std::to_string(timeout.count()) + " ms waiting for "
                                     + (keys.empty() ? std::string("keys") : keys.front()));
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
}

} // namespace dlion::engine::auth
