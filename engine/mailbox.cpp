#include "mailbox.h"

#include "comm.h"
#include "data_plane_auth.h"
#include "engine_log.h"
#include "engine_error.h"
#include "link_emulator.h"
#include "link_pacer.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace dlion::engine {

namespace {
constexpr double kHeaderBytes = Mailbox::kHeaderWords * 8;
// The largest payload a header may announce (1 GiB): a bigger one is a
// corrupted frame, not a model.
constexpr std::int64_t kMaxWords = std::int64_t(1) << 28;
// Bodies below this say more about latency than bandwidth...
constexpr double kMinEstimateBytes = 16 * 1024;
// ...unless they took this long: then the link's rate dominates (a link cut
// to a trickle only ever carries small payloads).
constexpr double kMinEstimateS = 0.25;
// A header receive that completed sooner than this after its receiver
// started waiting may have been in already.
constexpr double kHeaderWaitedS = 0.5e-3;
// A sample whose header's arrival is uncertain by more than this share of
// its body's time is not taken.
constexpr double kMostArrivalDoubt = 0.25;
// A body this large is confirmed by a Delivered header.
constexpr double kConfirmBytes = 1024;
// A payload that took this long and 4x what its link's estimate says (a
// round trip of latency cannot explain that) shows the link slower than
// believed. A bound from a delivered payload holds for twice its time, at
// least kSlowHoldS, and until the receiver's word has changed since
// (Ceiling).
constexpr double kSlowS = 0.5;
constexpr double kSlowFactor = 4;
constexpr double kSlowHoldS = 2;
constexpr std::size_t kConfirmTimesKept = 16;

using Clock = std::chrono::steady_clock;

QByteArray sealOf(const QByteArray &key, const std::int64_t *header, const torch::Tensor &body)
{
    const QByteArrayView sealed(reinterpret_cast<const char *>(header), Mailbox::kSealedWords * 8);
    const QByteArrayView bytes(reinterpret_cast<const char *>(body.data_ptr()), body.numel() * 4);
    return auth::mac(key, {sealed, bytes});
}

// Whether `header` carries the MAC of its sealed words and `body` under `key`.
bool sealedUnder(const QByteArray &key, const std::int64_t *header, const torch::Tensor &body)
{
    return auth::equal(QByteArrayView(reinterpret_cast<const char *>(header + Mailbox::kSealedWords), auth::kMacBytes),
                       sealOf(key, header, body));
}

Clock::duration seconds(double s) { return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s)); }

// a + b, sparse while at most half the entries are set.
SparseGradient sumOf(const SparseGradient &a, const SparseGradient &b)
{
    auto dense = torch::zeros({a.length});
    a.addTo(dense, 1.0);
    b.addTo(dense, 1.0);
    const torch::Tensor set = dense.nonzero().flatten();
    SparseGradient sum;
    sum.length = a.length;
    if (2 * set.numel() > a.length) {
        sum.values = dense;
    } else {
        sum.indices = set;
        sum.values = dense.index_select(0, set);
    }
    return sum;
}
} // namespace

Mailbox::Mailbox(Comm &comm, const LinkEmulator &emulator, std::int64_t eagerWords)
    : m_comm(comm), m_emulator(emulator), m_rank(comm.rank()), m_world(comm.world()), m_eagerWords(eagerWords),
      m_outbox(std::size_t(m_world)), m_latest(std::size_t(kKinds), std::vector<std::int64_t>(std::size_t(m_world), -1)),
      m_undelivered(std::size_t(m_world)), m_ceiling(std::size_t(m_world)), m_inFlight(std::size_t(m_world)),
      m_deliveries(std::size_t(m_world)),
      m_confirmS(std::size_t(m_world)), m_confirmsStarted(std::size_t(m_world)), m_confirmsDone(std::size_t(m_world)),
      m_reported(std::size_t(m_world), 0.0), m_closed(std::size_t(m_world), false),
      m_peerEvaluating(std::size_t(m_world), false), m_rowSent(std::size_t(m_world)), m_sentBytes(std::size_t(m_world), 0), m_sendKeys(std::size_t(m_world)),
      m_receiveKeys(std::size_t(m_world)), m_incoming(m_world)
{
    for (int j = 0; j < m_world; ++j) {
        if (j == m_rank)
            continue;
        m_sendKeys[std::size_t(j)] = auth::linkKey(comm.groupKey(), m_rank, j);
        m_receiveKeys[std::size_t(j)] = auth::linkKey(comm.groupKey(), j, m_rank);
        m_threads.emplace_back([this, j] { senderLoop(j); });
        m_threads.emplace_back([this, j] { courierLoop(j); });
        m_threads.emplace_back([this, j] { confirmerLoop(j); });
        m_threads.emplace_back([this, j] { receiverLoop(j); });
    }
}

Mailbox::~Mailbox()
{
    bool clean = false;
    {
        std::lock_guard lock(m_mutex);
        clean = m_closing && !m_error && m_byesSent == m_world - 1
            && std::count(m_closed.begin(), m_closed.end(), true) == std::ptrdiff_t(m_world - 1);
    }
    if (!clean)
        m_comm.abort();  // frees threads blocked in Gloo
    shutdown();
}

void Mailbox::shutdown()
{
    {
        std::lock_guard lock(m_mutex);
        m_stopping = true;
    }
    m_changed.notify_all();
    for (auto &t : m_threads) {
        if (t.joinable())
            t.join();
    }
}

void Mailbox::fail(std::exception_ptr e)
{
    {
        std::lock_guard lock(m_mutex);
        if (!m_error)
            m_error = e;
    }
    m_changed.notify_all();
}

void Mailbox::send(int peer, Kind kind, std::int64_t round, const torch::Tensor &payload, double t, std::int64_t aux)
{
    torch::Tensor words = payload.defined() ? payload.contiguous() : torch::empty({0}, torch::kInt);
    {
        std::lock_guard lock(m_mutex);
        if (m_closing)
            return;  // nothing goes out after Bye
        m_outbox[std::size_t(peer)].push_back({kind, round, aux, std::move(words), t, Clock::now(), {}, 0});
    }
    m_changed.notify_all();
}

std::int64_t Mailbox::eagerWordsFor(std::int64_t modelWords)
{
    // Room for a sparse payload's header and a control row; at most 16 MiB
    // a link, which each receiver keeps allocated.
    constexpr std::int64_t kSlackWords = 4096, kMostWords = std::int64_t(4) << 20;
    return std::min(modelWords + kSlackWords, kMostWords);
}

void Mailbox::postRow(const torch::Tensor &words, std::int64_t round, double t, double periodS)
{
    const auto now = Clock::now();
    {
        std::lock_guard lock(m_mutex);
        if (m_closing)
            return;
        m_row = words;
        ++m_rowVersion;
        for (int j = 0; j < m_world; ++j) {
            if (j == m_rank)
                continue;
            auto &queue = m_outbox[std::size_t(j)];
            const bool willRide = std::any_of(queue.begin(), queue.end(), [](const Outgoing &m) {
                return m.kind == Kind::Data
                    && ((m.payload.defined() && m.payload.numel() > 0)
                        || (m.gradient.values.defined() && m.gradient.values.numel() > 0));
            });
            RowSent &sent = m_rowSent[std::size_t(j)];
            if (periodS > 0 && (willRide || now - sent.at < seconds(periodS)))
                continue;
            queue.push_back({Kind::Control, round, 0, words, t, now, {}, 0});
            sent = {m_rowVersion, now};
        }
    }
    m_changed.notify_all();
}

std::int64_t Mailbox::attachRow(int peer, Outgoing &m)
{
    std::lock_guard lock(m_mutex);
    RowSent &sent = m_rowSent[std::size_t(peer)];
    if (m.kind != Kind::Data || m.payload.numel() == 0 || !m_row.defined() || sent.version == m_rowVersion)
        return 0;
    m.payload = torch::cat({m.payload, m_row});
    sent.version = m_rowVersion;
    sent.at = Clock::now();
    return m_row.numel();
}

void Mailbox::sendToPeers(Kind kind, std::int64_t round, const torch::Tensor &payload, double t, std::int64_t aux)
{
    for (int j = 0; j < m_world; ++j) {
        if (j != m_rank)
            send(j, kind, round, payload, t, aux);
    }
}

void Mailbox::sendGradient(int peer, std::int64_t round, const SparseGradient &g, double t, Pending pending,
                           double deadlineS, std::int64_t aux)
{
    {
        std::lock_guard lock(m_mutex);
        if (m_closing)
            return;
        auto &queue = m_outbox[std::size_t(peer)];
        Outgoing *last = queue.empty() ? nullptr : &queue.back();
        if (pending != Pending::Queue && last && last->kind == Kind::Data && last->pending == pending) {
            last->gradient = pending == Pending::Add ? sumOf(last->gradient, g) : g;
            last->round = round;
            last->t = t;
            return;  // the sender thread is not waiting for this one
        }
        Outgoing m{Kind::Data, round, aux, {}, t, Clock::now(), g, deadlineS};
        m.pending = pending;
        queue.push_back(std::move(m));
    }
    m_changed.notify_all();
}

std::vector<SparseGradient> Mailbox::takeUndelivered(int peer)
{
    std::lock_guard lock(m_mutex);
    return std::exchange(m_undelivered[std::size_t(peer)], {});
}

torch::Tensor Mailbox::streamWithin(int peer, Outgoing &m, Clock::time_point start)
{
    // The emulated link's rate, or on a real link the bound this sender's
    // own slow payloads showed: a payload sized before a link was cut would
    // otherwise hold the link for its whole size.
    double bps = 0;
    {
        const LinkEmulator::PacerScope network;
        bps = m_emulator.capMbps(m_rank, peer, m.t) * 1e6 / 8 / LinkEmulator::kWireOverhead;
    }
    const bool emulated = bps > 0;
    if (!emulated) {
        std::lock_guard lock(m_mutex);
        bps = m_ceiling[std::size_t(peer)].bps;
    }
    const double left = std::chrono::duration<double>(m.queued + seconds(m.deadlineS) - start).count();
    const double carried = bps > 0 ? std::max(0.0, left) * bps : 0;
    if (bps <= 0 || double(m.gradient.wireBytes()) + kHeaderBytes <= carried)
        return sparse_codec::encode(m.gradient);
    // An entry costs 8 bytes (index + value).
    const double room = carried - kHeaderBytes - double(sparse_codec::kHeaderInts * 4);
    SparseGradient rest;
    const SparseGradient sent = m.gradient.takeLargest(std::max<std::int64_t>(0, std::int64_t(room / 8)), &rest);
    {
        std::lock_guard lock(m_mutex);
        m_undelivered[std::size_t(peer)].push_back(std::move(rest));
        if (emulated && left > 0)
            m_ceiling[std::size_t(peer)] = {bps, Clock::time_point::max()};
    }
    return sent.values.numel() > 0 ? sparse_codec::encode(sent) : torch::empty({0}, torch::kInt);
}

std::vector<Mailbox::Message> Mailbox::take(Kind kind, std::int64_t upTo)
{
    std::vector<Message> out;
    std::lock_guard lock(m_mutex);
    for (auto it = m_inbox.begin(); it != m_inbox.end();) {
        if (it->kind == kind && it->round <= upTo) {
            out.push_back(std::move(*it));
            it = m_inbox.erase(it);
        } else {
            ++it;
        }
    }
    return out;
}

std::vector<std::int64_t> Mailbox::latestRounds(Kind kind) const
{
    std::lock_guard lock(m_mutex);
    return m_latest[std::size_t(kind)];
}

bool Mailbox::anyPeerClosed() const
{
    std::lock_guard lock(m_mutex);
    return std::find(m_closed.begin(), m_closed.end(), true) != m_closed.end();
}

void Mailbox::check()
{
    std::lock_guard lock(m_mutex);
    if (m_error)
        std::rethrow_exception(m_error);
}

void Mailbox::evaluating(bool started, std::int64_t index, double t)
{
    sendToPeers(Kind::Evaluating, index, {}, t, started ? 1 : 0);
}

std::int64_t Mailbox::evaluationAnnounced() const
{
    std::lock_guard lock(m_mutex);
    return m_evaluationAnnounced;
}

double Mailbox::evaluatingSecondsLocked() const
{
    const bool now = std::find(m_peerEvaluating.begin(), m_peerEvaluating.end(), true) != m_peerEvaluating.end();
    return m_evaluatingS + (now ? std::chrono::duration<double>(Clock::now() - m_evaluatingSince).count() : 0.0);
}

double Mailbox::takeWaitedOnEvaluationS()
{
    std::lock_guard lock(m_mutex);
    return std::exchange(m_waitedOnEvaluationS, 0.0);
}

bool Mailbox::waitUntil(Kind kind, const std::function<bool(const std::vector<std::int64_t> &)> &ready,
                        const std::function<bool()> &tick, double tickS)
{
    const auto &latest = m_latest[std::size_t(kind)];
    double evaluatingAtStart = 0;
    {
        std::lock_guard lock(m_mutex);
        evaluatingAtStart = evaluatingSecondsLocked();
    }
    for (;;) {
        {
            std::unique_lock lock(m_mutex);
            const bool done = m_changed.wait_for(lock, seconds(tickS), [&] {
                return m_error || ready(latest) || std::find(m_closed.begin(), m_closed.end(), true) != m_closed.end();
            });
            if (m_error)
                std::rethrow_exception(m_error);
            if (done) {
                m_waitedOnEvaluationS += evaluatingSecondsLocked() - evaluatingAtStart;
                return ready(latest);
            }
        }
        if (!tick())
            return false;
    }
}

bool Mailbox::waitForRounds(Kind kind, const std::vector<std::int64_t> &need, const std::function<bool()> &tick)
{
    return waitUntil(
        kind,
        [&](const std::vector<std::int64_t> &latest) {
            for (std::size_t j = 0; j < need.size(); ++j) {
                if (latest[j] < need[j])
                    return false;
            }
            return true;
        },
        tick);
}

std::vector<double> Mailbox::incomingBandwidth() const
{
    std::lock_guard lock(m_mutex);
    std::vector<double> out(std::size_t(m_world), 0.0);
    for (int j = 0; j < m_world; ++j)
        out[std::size_t(j)] = m_incoming.bytesPerSecond(j);
    return out;
}

std::vector<double> Mailbox::outgoingEstimate(std::vector<double> reported)
{
    constexpr double kCaughtUp = 1.5;
    const auto now = Clock::now();
    std::lock_guard lock(m_mutex);
    for (std::size_t j = 0; j < reported.size() && j < m_ceiling.size(); ++j) {
        m_reported[j] = reported[j];
        Ceiling &ceiling = m_ceiling[j];
        const bool lapsed = now >= ceiling.until && reported[j] != ceiling.reportedWhenSet;
        if (ceiling.bps > 0 && (lapsed || (reported[j] > 0 && reported[j] <= kCaughtUp * ceiling.bps)))
            ceiling = {};
        if (ceiling.bps > 0)
            reported[j] = ceiling.bps;
        // Not in yet: the link carries less than its bytes in that time.
        if (!m_inFlight[j].empty()) {
            const InFlight &f = m_inFlight[j].front();
            const double bound = slowRateLocked(int(j), f.bytes, std::chrono::duration<double>(now - f.since).count(), reported[j]);
            if (bound > 0)
                reported[j] = bound;
        }
    }
    return reported;
}

double Mailbox::slowRateLocked(int peer, double bytes, double seconds, double believedBps) const
{
    const auto &times = m_confirmS[std::size_t(peer)];
    const double net = seconds - (times.empty() ? 0.0 : *std::min_element(times.begin(), times.end()));
    const bool slow = net >= kSlowS && (believedBps <= 0 || net >= kSlowFactor * bytes / believedBps);
    return slow ? bytes / net : 0;
}

void Mailbox::report(protocol::RoundRecord &record, const std::vector<double> &bandwidth)
{
    const int n = m_world;
    record.linkMbps.assign(std::size_t(n), 0.0);
    record.linkBytes.assign(std::size_t(n), 0.0);
    std::lock_guard lock(m_mutex);
    for (int j = 0; j < n; ++j) {
        if (j == m_rank)
            continue;
        if (!bandwidth.empty())
            record.linkMbps[std::size_t(j)] = bandwidth[std::size_t(m_rank * n + j)] * 8e-6;
        record.linkBytes[std::size_t(j)] = double(m_sentBytes[std::size_t(j)]);
        record.bytesSent += m_sentBytes[std::size_t(j)];
        m_sentBytes[std::size_t(j)] = 0;
    }
}

void Mailbox::close()
{
    {
        std::lock_guard lock(m_mutex);
        for (int j = 0; j < m_world; ++j) {
            if (j != m_rank)
                // One word: it takes the eager receive the peer keeps posted.
                m_outbox[std::size_t(j)].push_back({Kind::Bye, 0, 0, torch::zeros({1}, torch::kInt), 0, Clock::now(), {}, 0});
        }
        m_closing = true;
    }
    m_changed.notify_all();
    std::unique_lock lock(m_mutex);
    // Bounded: a peer that never says Bye breaks its receiver's Gloo wait
    // within the group's timeout, which lands here as m_error.
    m_changed.wait(lock, [&] {
        return m_error
            || (m_byesSent == m_world - 1
                && std::count(m_closed.begin(), m_closed.end(), true) == std::ptrdiff_t(m_world - 1)
                && std::all_of(m_inFlight.begin(), m_inFlight.end(), [](const auto &q) { return q.empty(); }));
    });
    if (m_error)
        std::rethrow_exception(m_error);
}

void Mailbox::senderLoop(int peer)
{
    try {
        LinkPacer pacer(1);
        std::int64_t sequence = 0;
        // The receives the receiver has posted ahead, as the times this
        // sender hears of them, oldest first (Gloo fills them in order):
        // kPostedAhead of each kind at the start, and another a round trip
        // after the receiver takes one (docs/emulation.md).
        std::deque<Clock::time_point> headerReceives(kPostedAhead), eagerReceives(kPostedAhead);
        Clock::time_point previousIn{};  // when the previous message was wholly in
        for (;;) {
            Outgoing m;
            {
                std::unique_lock lock(m_mutex);
                auto &queue = m_outbox[std::size_t(peer)];
                m_changed.wait(lock, [&] {
                    return m_stopping || m_error
                        || (!queue.empty() && (queue.front().pending == Pending::Queue || m_inFlight[std::size_t(peer)].empty()));
                });
                if (m_stopping || m_error)
                    return;
                m = std::move(queue.front());
                queue.pop_front();
            }
            double latencyS = 0;
            {
                const LinkEmulator::PacerScope network;
                latencyS = m_emulator.latencyS();
            }
            // The link is free when the previous message has left it. Gloo
            // holds a header or body until its receiver has posted the
            // receive: headers and eager bodies go into receives posted
            // ahead; a larger body waits for one of its size, posted once
            // the receiver has taken its header, so that body leaves a
            // round trip after the header, as over real links (without
            // this the emulator spared every payload two latencies, and a
            // strategy that waits for its payloads each round gained most).
            const auto latency = seconds(latencyS);
            const auto start = std::max({m.queued, pacer.reserve(0, 0, m.queued), headerReceives.front()});
            // The receiver takes a header once it is in and the previous
            // message is whole.
            const auto bodyLeaves = [&](std::int64_t words, Clock::time_point headerLeaves) {
                return words <= m_eagerWords ? std::max(headerLeaves, eagerReceives.front())
                                             : std::max(headerLeaves + latency, previousIn) + latency;
            };
            if (m.gradient.values.defined()) {
                m.payload = m.gradient.values.numel() == 0 ? torch::empty({0}, torch::kInt)
                    : m.deadlineS > 0 ? streamWithin(peer, m, bodyLeaves(m.gradient.wireBytes() / 4, start))
                                      : sparse_codec::encode(m.gradient);
            }
            const std::int64_t rowWords = attachRow(peer, m);
            torch::Tensor header = sealedHeader(peer, m.kind, m.round, m.aux, ++sequence, m.payload, rowWords);
            const double bytes = kHeaderBytes + double(m.payload.numel()) * 4;
            double transmitS = 0;
            {
                const LinkEmulator::PacerScope network;
                transmitS = m_emulator.transferSeconds(m_rank, peer, bytes, m.t) - latencyS;
            }
            // The link carries a message once it is encoded and sealed: the
            // header leaves then.
            const auto ready = std::max(start, Clock::now());
            const bool eager = m.payload.numel() <= m_eagerWords;
            const auto done = pacer.reserve(0, transmitS, m.payload.numel() > 0 ? bodyLeaves(m.payload.numel(), ready) : ready);
            // The header arrives first, unless it is the whole message.
            const auto headerIn = (m.payload.numel() > 0 ? ready : done) + latency;
            headerReceives.pop_front();
            headerReceives.push_back(std::max(headerIn, previousIn) + latency);
            if (m.payload.numel() > 0 && eager) {
                eagerReceives.pop_front();
                eagerReceives.push_back(done + 2 * latency);
            }
            previousIn = done + latency;
            const bool confirm = double(m.payload.numel()) * 4 >= kConfirmBytes;
            {
                std::lock_guard lock(m_mutex);
                if (confirm) {
                    m_inFlight[std::size_t(peer)].push_back({bytes, ready, {}, done + 2 * latency});
                    ++m_confirmsStarted[std::size_t(peer)];
                }
                m_deliveries[std::size_t(peer)].push_back(
                    {m.kind, header, m.payload,
                     confirm ? sealedHeader(peer, Kind::Delivered, 0, 0, ++sequence, torch::empty({0}, torch::kInt))
                             : torch::Tensor(),
                     headerIn, previousIn, eager, std::int64_t(bytes)});
            }
            m_changed.notify_all();
            // The next message is taken once the link is free, so that
            // what waits for it can still be added to or replaced.
            if (m.kind == Kind::Bye || !sleepUntil(done))
                return;
        }
    } catch (...) {
        fail(std::current_exception());
    }
}

void Mailbox::courierLoop(int peer)
{
    try {
        auto &queue = m_deliveries[std::size_t(peer)];
        for (;;) {
            Delivery d;
            {
                std::unique_lock lock(m_mutex);
                m_changed.wait(lock, [&] { return m_stopping || m_error || !queue.empty(); });
                if (m_stopping || m_error)
                    return;
                d = std::move(queue.front());
                queue.pop_front();
            }
            if (!sleepUntil(d.headerAt))
                return;
            const Comm::Request h = m_comm.isend(d.header, peer, kTagHeader);
            Comm::Request b;
            if (d.body.numel() > 0) {
                if (!sleepUntil(d.bodyAt))
                    return;
                b = m_comm.isend(d.body, peer, d.eager ? kTagBody : kTagLargeBody);
            }
            h.wait();
            b.wait();
            {
                std::lock_guard lock(m_mutex);
                if (d.delivered.defined()) {
                    auto &inFlight = m_inFlight[std::size_t(peer)];
                    const auto unsent = std::find_if(inFlight.begin(), inFlight.end(),
                                                     [](const InFlight &f) { return !f.delivered.sent(); });
                    unsent->delivered = m_comm.isend(d.delivered, peer, kTagDelivered);
                }
                m_sentBytes[std::size_t(peer)] += d.bytes;
                if (d.kind == Kind::Bye)
                    ++m_byesSent;
            }
            m_changed.notify_all();
            if (d.kind == Kind::Bye)
                return;
        }
    } catch (...) {
        fail(std::current_exception());
    }
}

bool Mailbox::sleepUntil(Clock::time_point when)
{
    std::unique_lock lock(m_mutex);
    return !m_changed.wait_until(lock, when, [&] { return m_stopping; });
}

void Mailbox::confirmerLoop(int peer)
{
    try {
        auto &queue = m_inFlight[std::size_t(peer)];
        for (;;) {
            Comm::Request delivered;
            {
                std::unique_lock lock(m_mutex);
                m_changed.wait(lock, [&] { return m_stopping || (!queue.empty() && queue.front().delivered.sent()); });
                if (m_stopping)
                    return;
                delivered = queue.front().delivered;
            }
            delivered.wait();
            {
                std::unique_lock lock(m_mutex);
                if (m_changed.wait_until(lock, queue.front().confirmed, [&] { return m_stopping; }))
                    return;
                const auto now = Clock::now();
                const InFlight f = queue.front();
                queue.pop_front();
                ++m_confirmsDone[std::size_t(peer)];
                const double tookS = std::chrono::duration<double>(now - f.since).count();
                Ceiling &ceiling = m_ceiling[std::size_t(peer)];
                const double slow
                    = slowRateLocked(peer, f.bytes, tookS, ceiling.bps > 0 ? ceiling.bps : m_reported[std::size_t(peer)]);
                if (slow > 0)
                    ceiling = {slow, now + seconds(std::max(kSlowHoldS, 2 * tookS)), m_reported[std::size_t(peer)]};
                auto &times = m_confirmS[std::size_t(peer)];
                times.push_back(tookS);
                if (times.size() > kConfirmTimesKept)
                    times.pop_front();
            }
            m_changed.notify_all();  // close() waits for the last one
        }
    } catch (...) {
        fail(std::current_exception());
    }
}

void Mailbox::receiverLoop(int peer)
{
    try {
        std::int64_t lastSequence = 0;
        // Receives posted ahead, kPostedAhead of each kind, oldest first.
        struct Posted {
            torch::Tensor buffer;
            Comm::Request request;
            Clock::time_point at;
            // Confirmed payloads this worker had started to `peer` by then:
            // Gloo's word that the receive is posted follows their bytes.
            std::int64_t behind = 0;
        };
        std::deque<Posted> headers, eagerBodies;
        const auto post = [&](std::deque<Posted> &posted, torch::Tensor buffer, int tag) {
            Comm::Request request = m_comm.irecv(buffer, peer, tag);
            posted.push_back({std::move(buffer), request, Clock::now(), m_confirmsStarted[std::size_t(peer)].load()});
        };
        const auto postHeader = [&] { post(headers, torch::zeros({kHeaderWords}, torch::kLong), kTagHeader); };
        // Reuses `buffer` if given.
        const auto postEagerBody = [&](torch::Tensor buffer) {
            post(eagerBodies, buffer.defined() ? buffer : torch::empty({m_eagerWords}, torch::kInt), kTagBody);
        };
        const auto takeFront = [](std::deque<Posted> &posted) {
            Posted front = std::move(posted.front());
            posted.pop_front();
            front.request.wait();
            return front;
        };
        for (int i = 0; i < kPostedAhead; ++i) {
            postHeader();
            postEagerBody({});
        }
        // Delivered headers are checked once in: a forged one is counted
        // and dropped like any message that fails.
        std::int64_t lastDeliveredSequence = 0;
        torch::Tensor deliveredHeader;
        Comm::Request delivered;  // the Delivered receive outstanding, if any
        const auto takeDelivered = [&] {
            if (!delivered.sent())
                return;
            delivered.wait();
            delivered = {};
            const auto *w = deliveredHeader.data_ptr<std::int64_t>();
            if (w[0] != std::int64_t(Kind::Delivered) || w[2] != 0 || w[4] <= lastDeliveredSequence
                || !sealedUnder(m_receiveKeys[std::size_t(peer)], w, torch::empty({0}, torch::kInt))) {
                reject(peer, "was no genuine delivery notice");
                return;
            }
            lastDeliveredSequence = w[4];
        };
        Clock::time_point previousIn;
        for (;;) {
            // A header that was in before this thread came to wait for it
            // (the thread was taking the previous message) arrived at some
            // time since its receive was posted and the previous message
            // was in (a link keeps its order): its body's time may be too
            // short, and a 16 KiB probe on a 0.2 Mbit/s link read as 150
            // Mbit/s.
            const auto waitFrom = Clock::now();
            const Posted header = takeFront(headers);
            const auto headerArrived = Clock::now();
            const std::int64_t confirmedByHeader = m_confirmsDone[std::size_t(peer)].load();
            const double arrivalDoubtS = headerArrived - waitFrom >= seconds(kHeaderWaitedS)
                ? 0.0
                : std::chrono::duration<double>(headerArrived - std::max(header.at, previousIn)).count();
            const auto *h = header.buffer.data_ptr<std::int64_t>();
            const std::int64_t kind = h[0], words = h[2], rowWords = h[5];
            if (kind < std::int64_t(Kind::Data) || kind >= std::int64_t(Kind::Delivered) || words < 0 || words > kMaxWords
                || rowWords < 0 || rowWords > words || (rowWords > 0 && kind != std::int64_t(Kind::Data)))
                throw EngineError("malformed message header from worker rank " + std::to_string(peer) + " (kind "
                                  + std::to_string(kind) + ", " + std::to_string(words) + " words, a row of "
                                  + std::to_string(rowWords) + ")");
            // Another header's receive goes up now: the next messages may
            // come while this body does (nothing follows a Bye).
            if (kind != std::int64_t(Kind::Bye))
                postHeader();
            Message m;
            m.from = peer;
            m.kind = Kind(kind);
            m.round = h[1];
            m.aux = h[3];
            const bool eager = words > 0 && words <= m_eagerWords;
            // The body could leave only once Gloo's word that its receive
            // was posted had crossed the other way, behind the payloads
            // this worker was sending `peer` then. Unless those had been
            // delivered before the header came, the body's time holds that
            // wait: on a link cut to 0.2 Mbit/s a 64-byte row waited 1.4-2.7
            // s and read as 0.0005 Mbit/s, an estimate whose payloads were
            // then too small ever to be measured again.
            bool noticeClear = false;
            if (eager) {
                const Posted body = takeFront(eagerBodies);
                noticeClear = body.behind <= confirmedByHeader;
                // A small message is copied out, and its buffer takes a
                // later body; a large one keeps it.
                const bool small = 2 * words < m_eagerWords;
                m.payload = small ? body.buffer.narrow(0, 0, words).clone() : body.buffer.narrow(0, 0, words);
                if (kind != std::int64_t(Kind::Bye))
                    postEagerBody(small ? body.buffer : torch::Tensor());
            } else {
                m.payload = torch::empty({words}, torch::kInt);
                if (words > 0)
                    m_comm.irecv(m.payload, peer, kTagLargeBody).wait();
            }
            previousIn = Clock::now();
            const double tookS = std::chrono::duration<double>(previousIn - headerArrived).count();
            // Gloo keeps a link's order, so a sequence number that does not
            // rise is a replay.
            if (h[4] <= lastSequence) {
                reject(peer, "was replayed");
                continue;
            }
            if (!sealedUnder(m_receiveKeys[std::size_t(peer)], h, m.payload)) {
                reject(peer, "failed authentication");
                continue;
            }
            lastSequence = h[4];
            const double bodyBytes = double(words) * 4;
            // Its sender's Delivered header completes once this is posted.
            // The previous one's sender sent it before this body, so it is
            // in or right behind (Gloo queues a send only once its receive
            // is posted): taking it now keeps one receive outstanding.
            if (bodyBytes >= kConfirmBytes) {
                takeDelivered();
                deliveredHeader = torch::zeros({kHeaderWords}, torch::kLong);
                delivered = m_comm.irecv(deliveredHeader, peer, kTagDelivered);
            }
            if (m.kind == Kind::Bye) {
                takeDelivered();
                {
                    std::lock_guard lock(m_mutex);
                    m_closed[std::size_t(peer)] = true;
                }
                m_changed.notify_all();
                return;
            }
            {
                std::lock_guard lock(m_mutex);
                // The sender's link time covered header and body alike.
                if (eager && arrivalDoubtS <= kMostArrivalDoubt * tookS
                    && noticeClear && (bodyBytes >= kMinEstimateBytes || tookS >= kMinEstimateS))
                    m_incoming.addTransfer(peer, kHeaderBytes + bodyBytes, tookS);
                if (m.kind == Kind::Evaluating) {
                    // Banks the time some peer was evaluating up to now.
                    m_evaluatingS = evaluatingSecondsLocked();
                    m_evaluatingSince = Clock::now();
                    m_peerEvaluating[std::size_t(peer)] = m.aux != 0;
                    if (m.aux != 0)
                        m_evaluationAnnounced = std::max(m_evaluationAnnounced, m.round);
                    continue;
                }
                if (rowWords > 0) {
                    Message row{peer, Kind::Control, m.round, 0, m.payload.narrow(0, words - rowWords, rowWords)};
                    m.payload = m.payload.narrow(0, 0, words - rowWords);
                    auto &latestRow = m_latest[std::size_t(Kind::Control)][std::size_t(peer)];
                    latestRow = std::max(latestRow, row.round);
                    m_inbox.push_back(std::move(row));
                }
                auto &latest = m_latest[std::size_t(kind)][std::size_t(peer)];
                latest = std::max(latest, m.round);
                m_inbox.push_back(std::move(m));
            }
            m_changed.notify_all();
        }
    } catch (...) {
        fail(std::current_exception());
    }
}

torch::Tensor Mailbox::sealedHeader(int peer, Kind kind, std::int64_t round, std::int64_t aux, std::int64_t sequence,
                                    const torch::Tensor &body, std::int64_t rowWords) const
{
    auto header = torch::tensor({std::int64_t(kind), round, body.numel(), aux, sequence, rowWords, std::int64_t(0),
                                 std::int64_t(0)},
                                torch::kLong);
    seal(m_sendKeys[std::size_t(peer)], header, body);
    return header;
}

void Mailbox::seal(const QByteArray &key, torch::Tensor &header, const torch::Tensor &body)
{
    auto *words = header.data_ptr<std::int64_t>();
    std::memcpy(words + kSealedWords, sealOf(key, words, body).constData(), auth::kMacBytes);
}

void Mailbox::reject(int peer, const char *why)
{
    int n = 0;
    {
        std::lock_guard lock(m_mutex);
        n = ++m_rejected;
    }
    if (auth::worthLogging(n))
        qCWarning(lcEngine).noquote() << QStringLiteral("worker rank %1 dropped a message from rank %2 that %3 (%4 so far); someone "
                                                        "without the run secret may be on the data plane")
                                             .arg(m_rank)
                                             .arg(peer)
                                             .arg(QLatin1String(why))
                                             .arg(n);
}

int Mailbox::rejected() const
{
    std::lock_guard lock(m_mutex);
    return m_rejected;
}

torch::Tensor Mailbox::packDoubles(const std::vector<double> &v)
{
    auto words = torch::empty({std::int64_t(v.size()) * 2}, torch::kInt);
    std::memcpy(words.data_ptr<std::int32_t>(), v.data(), v.size() * sizeof(double));
    return words;
}

std::vector<double> Mailbox::unpackDoubles(const torch::Tensor &words)
{
    std::vector<double> v(std::size_t(words.numel() / 2));
    std::memcpy(v.data(), words.data_ptr<std::int32_t>(), v.size() * sizeof(double));
    return v;
}

} // namespace dlion::engine
