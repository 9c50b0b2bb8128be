#pragma once

#include "bandwidth_estimator.h"
#include "comm.h"
#include "sparse_codec.h"

#include <telemetry.h>

#include <torch/types.h>

#include <QByteArray>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <limits>
#include <mutex>
#include <thread>
#include <vector>

namespace dlion::engine {

class LinkEmulator;

// Messages between the workers of a group, for every strategy that does
// not reduce collectively: sending never waits, so Gaia, Ako and Hop
// workers run at their own pace, and DLion waits only for the messages of
// its round. Each outgoing link has a queue, a sender thread and a
// courier: a message starts when the link has carried the previous one,
// its header arrives a latency later and its body when the emulated link
// has carried its bytes (plus the latency), as on a real link, and the
// courier hands each to Gloo then; each incoming link has a receiver
// thread that files what arrives.
//
// Receivers measure their incoming links: the time from a message's header
// to the end of its body is the time its bytes took on the link. Bodies
// under 16 KiB that took under 0.25 s give no sample (timer noise
// dominates them), nor do bodies over the eager size, whose time holds a
// round trip (below), nor do bodies whose receive was posted while this
// worker's own payloads to their sender were on their way, unless those
// were delivered before the header came (Gloo's word that the receive was
// posted followed them, and the body waited for it), nor does a message
// whose header was in before the receiver came to wait for it, unless its
// receive was posted or the previous message was in just before (its
// arrival time is otherwise unknown).
//
// Gloo hands a message's bytes over only once the receiver has posted its
// receive, and takes a shorter message into a larger receive. So each
// receiver keeps kPostedAhead receives posted for headers, and as many of
// `eagerWords` for bodies (the largest message a strategy sends, a model
// or a dense gradient with a control row), and posts another as it takes
// one. A body that fits leaves right behind its header, unless the body
// kPostedAhead before it left less than a round trip earlier (with one
// receive ahead, a synchronous round lasted about 2L plus its transfer
// over links of latency L, where L plus the transfer and the compute is
// what the exchange needs). A larger body leaves only once its receiver,
// having its header, has posted a receive of its size: a round trip after
// the header. The emulator charges all of it (docs/emulation.md).
//
// Senders see their links too. After a body of 1 KiB or more the sender
// sends an empty Delivered header on a tag of its own, whose receive the
// receiver posts once that body is in and checked: its send completes when
// the body has arrived. A confirmer thread per link waits for it, so the
// sender goes on with its next message meanwhile. Until then the body is in
// flight, and its bytes over the time since it left bound the link's rate:
// a link cut mid-run shows at once on the sender's side, where the
// receiver's measurement would come back over a link that may be just as
// slow, behind the payloads queued on it. (Before protocol 5 Delivered
// took the next header's receive, which the receiver posted only after the
// body: on a link of latency L the next message could leave only 3L after
// a payload arrived, a cost the emulator never charged.)
//
// Every message carries a MAC under the key of its link's direction over
// its sequence number, header and body: a message that fails it (a
// stranger's, a replayed or a reflected one) is dropped and counted, never
// applied.
//
// close() sends Bye after everything queued and returns once every peer's
// Bye has arrived; no thread uses the Comm after that, so the group's
// collectives (the final evaluation) can follow. A lost peer, an abort or
// a malformed frame surfaces as an exception from check() and waitUntil().
class Mailbox {
public:
    // Delivered is the mailbox's own ("Senders see their links" above).
    enum class Kind : std::int64_t { Data = 1, Control, Eval, Barrier, Score, Model, Evaluating, Bye, Delivered };
    static constexpr int kKinds = int(Kind::Delivered) + 1;
    struct Message {
        int from = -1;
        Kind kind = Kind::Data;
        std::int64_t round = 0;
        std::int64_t aux = 0;   // the strategy's own word (DLion: batch share and flags)
        torch::Tensor payload;  // int32 words, possibly empty
    };

    // `eagerWords`: see above; every peer must pass the same.
    Mailbox(Comm &comm, const LinkEmulator &emulator, std::int64_t eagerWords = kDefaultEagerWords);
    static constexpr std::int64_t kDefaultEagerWords = 64 * 1024;
    // The eager size for a model of `modelWords` words (parameters and
    // buffers): a model, or a dense gradient, plus a control row.
    static std::int64_t eagerWordsFor(std::int64_t modelWords);
    // Without close(): aborts the Comm so that no thread stays blocked.
    ~Mailbox();
    Mailbox(const Mailbox &) = delete;
    Mailbox &operator=(const Mailbox &) = delete;

    int rank() const { return m_rank; }
    int world() const { return m_world; }

    // The worker's control row (int32 words, packDoubles). It rides at the
    // end of the next non-empty Data message to each peer, where it costs
    // no message of its own (one more message per round paid a latency
    // round trip on its link: 6-8% of DLion's throughput on wan-hetero). It
    // goes alone, as a Control message, to a peer that has had no row for
    // `periodS` and has no such Data message queued; periodS 0: alone to
    // every peer now.
    // A receiver files a riding row as a Control message of its Data
    // message's round.
    void postRow(const torch::Tensor &words, std::int64_t round, double t, double periodS);
    // Queues `payload` (int32 words; undefined or empty for none) to `peer`
    // and returns at once. `t` is the training time, for the link schedule.
    void send(int peer, Kind kind, std::int64_t round, const torch::Tensor &payload, double t, std::int64_t aux = 0);
    // send() to every peer.
    void sendToPeers(Kind kind, std::int64_t round, const torch::Tensor &payload, double t, std::int64_t aux = 0);
    // What becomes of a gradient sent while the link has not started the
    // previous one to the same peer: it queues behind it, is added into it
    // (updates: Gaia, Ako) or replaces it (the newer state: Hop). Adding or
    // replacing bounds a link's queue to one message when a worker offers
    // more than the link carries, as a sender that accumulates until the
    // link is free would; queueing is for one message per round (DLion).
    // An added or replaced message is taken only once the link has
    // delivered the previous payload: a real link's sender hands a body to
    // its socket at once and would otherwise pick the next one a whole
    // transfer early, staler than the emulator's (Hop ran about 2x slower
    // over tc links than emulated), and it could not leave any sooner,
    // since its receive is posted only once the previous body is in.
    enum class Pending { Queue, Add, Replace };
    // Queues a gradient payload as Data, encoded when the link takes it.
    // With deadlineS > 0 it streams its entries largest first and stops
    // deadlineS after this call, as a sender bounded by a deadline does on a
    // real link: what its link would not have carried by then comes back
    // from takeUndelivered(peer). `g` must not change after the call.
    void sendGradient(int peer, std::int64_t round, const SparseGradient &g, double t, Pending pending,
                      double deadlineS = 0, std::int64_t aux = 0);
    std::vector<SparseGradient> takeUndelivered(int peer);
    // Takes every message of `kind` received so far of round `upTo` or
    // earlier, oldest first; later rounds' stay for their turn (a fast peer
    // may already have sent its next transfer's score).
    std::vector<Message> take(Kind kind, std::int64_t upTo = std::numeric_limits<std::int64_t>::max());
    // The newest round of a `kind` message from each peer (-1: none yet).
    std::vector<std::int64_t> latestRounds(Kind kind) const;

    // Blocks until ready(latestRounds(kind)) holds (true) or a peer has said
    // Bye or tick() returns false (false). ready runs under the mailbox's
    // lock; tick runs about every `tickS` outside it. Throws what check() throws.
    bool waitUntil(Kind kind, const std::function<bool(const std::vector<std::int64_t> &)> &ready,
                   const std::function<bool()> &tick, double tickS = 0.25);
    // waitUntil() for the common case: a `kind` message of round need[j] or
    // later from every peer j (need[j] < 0: nothing from j).
    bool waitForRounds(Kind kind, const std::vector<std::int64_t> &need, const std::function<bool()> &tick);
    // Tells every peer that this worker starts or ends an evaluation. While
    // a peer evaluates, the time this worker's waits last is not training
    // time (all-reduce's evaluation stops every clock at once; a worker that
    // waits for an evaluating peer's payload would otherwise be charged for
    // it, and a synchronous strategy more than an asynchronous one).
    // `index`: which evaluation (the training clock / the interval).
    void evaluating(bool started, std::int64_t index, double t);
    // The highest evaluation index a peer has started (-1: none yet).
    std::int64_t evaluationAnnounced() const;
    // How long this worker's waits overlapped a peer's evaluation since the
    // last call.
    double takeWaitedOnEvaluationS();
    // Messages dropped because they failed authentication.
    int rejected() const;
    // Rethrows the first failure of a sender or receiver thread.
    void check();
    bool anyPeerClosed() const;

    std::vector<double> incomingBandwidth() const;
    // `reported`: bytes/s of each outgoing link as its receiver measured it
    // (0 = unknown). Returns it lowered to what this worker's own sends saw
    // a link carry: a payload in flight for 0.25 s or more, one delivered
    // that slowly, or one streamed to its deadline. The receiver's word
    // comes back over a link that may be just as slow, so it lags; a bound
    // from a delivered payload holds until the receiver's estimate has come
    // down to it or a later payload shows the link faster.
    std::vector<double> outgoingEstimate(std::vector<double> reported);
    // Fills a round's per-link bytes (put on the links since the last report) and
    // outgoing-link estimates (from the n x n matrix `bandwidth`, bytes/s).
    void report(protocol::RoundRecord &record, const std::vector<double> &bandwidth);

    // The Bye handshake; throws what check() throws.
    void close();

    // The wire: a header of kHeaderWords int64 (kind, round, payload words,
    // the strategy's word, sequence number, words of a riding control row
    // at the payload's end, MAC) on kTagHeader, then the payload on
    // kTagBody (kTagLargeBody when over the eager size). seal() writes the
    // MAC of `header`'s first kSealedWords and `body` under `key` into the
    // header.
    static constexpr int kTagHeader = 11;
    static constexpr int kTagBody = 12;
    static constexpr int kTagDelivered = 13;
    static constexpr int kTagLargeBody = 14;
    // Header and eager-body receives each receiver keeps posted per link.
    static constexpr int kPostedAhead = 2;
    static constexpr std::int64_t kHeaderWords = 8;
    static constexpr std::int64_t kSealedWords = 6;
    static void seal(const QByteArray &key, torch::Tensor &header, const torch::Tensor &body);

    // Control rows and evaluation results travel as doubles.
    static torch::Tensor packDoubles(const std::vector<double> &v);
    static std::vector<double> unpackDoubles(const torch::Tensor &words);

private:
    using Clock = std::chrono::steady_clock;
    struct Outgoing {
        Kind kind;
        std::int64_t round;
        std::int64_t aux;
        torch::Tensor payload;
        double t;
        Clock::time_point queued;
        SparseGradient gradient;  // a gradient message's, encoded by the sender thread
        double deadlineS = 0;
        Pending pending = Pending::Queue;
    };

    // Takes each queued message once its link is free, and schedules it
    // for the courier.
    void senderLoop(int peer);
    // Hands each scheduled header and body to Gloo when it arrives over
    // the emulated link, so that a link carries the next message while the
    // previous one is still on its way, as a real one does.
    void courierLoop(int peer);
    // Waits until `when`; false: the mailbox is stopping.
    bool sleepUntil(Clock::time_point when);
    // The largest entries of `m.gradient` that the link carries between
    // `start` and the message's deadline; the rest goes to m_undelivered.
    torch::Tensor streamWithin(int peer, Outgoing &m, Clock::time_point start);
    // The header of a message to `peer` with `body`, sealed under its key.
    torch::Tensor sealedHeader(int peer, Kind kind, std::int64_t round, std::int64_t aux, std::int64_t sequence,
                               const torch::Tensor &body, std::int64_t rowWords = 0) const;
    // Appends the newest control row to a Data message's payload for
    // `peer` unless that peer has it; returns its words (0: none).
    std::int64_t attachRow(int peer, Outgoing &m);
    // Waits for each Delivered header to `peer` in turn and keeps what the
    // time its payload took says of the link.
    void confirmerLoop(int peer);
    // The rate `bytes` taking `seconds` on the link to `peer` shows, beyond
    // its latency, if far slower than `believedBps` (0: unknown); else 0.
    // Under m_mutex.
    double slowRateLocked(int peer, double bytes, double seconds, double believedBps) const;
    void receiverLoop(int peer);
    // Counts and reports a message from `peer` that is not applied.
    void reject(int peer, const char *why);
    // Seconds during which at least one peer was evaluating, as announced
    // on its link; under m_mutex.
    double evaluatingSecondsLocked() const;
    void fail(std::exception_ptr e);
    void shutdown();

    Comm &m_comm;
    const LinkEmulator &m_emulator;
    const int m_rank;
    const int m_world;
    const std::int64_t m_eagerWords;

    mutable std::mutex m_mutex;
    std::condition_variable m_changed;
    std::vector<std::deque<Outgoing>> m_outbox;
    std::deque<Message> m_inbox;
    std::vector<std::vector<std::int64_t>> m_latest;  // [kind][peer]
    std::vector<std::vector<SparseGradient>> m_undelivered;
    // Per peer: bytes/s a slow or deadline-bound send carried (0 = none),
    // believed until `until` once the receiver's word has changed since it
    // was set: that word comes back over a link that may be just as slow,
    // and a stale one from before a cut sized the next payload for 40
    // Mbit/s on a link cut to 0.2 (a 4.5 s stall).
    struct Ceiling {
        double bps = 0;
        Clock::time_point until = Clock::time_point::max();
        double reportedWhenSet = 0;
    };
    std::vector<Ceiling> m_ceiling;
    // A payload whose Delivered header is on its way.
    struct InFlight {
        double bytes = 0;
        Clock::time_point since;
        Comm::Request delivered;
        // On an emulated link: when word of the delivery reaches the sender,
        // a latency after the body arrived.
        Clock::time_point confirmed{};
    };
    std::vector<std::deque<InFlight>> m_inFlight;  // per peer, oldest first
    // A scheduled message: when its header and its body arrive.
    struct Delivery {
        Kind kind = Kind::Data;
        torch::Tensor header, body;
        torch::Tensor delivered;  // the sealed Delivered header to follow it, if any
        Clock::time_point headerAt, bodyAt;
        bool eager = true;
        std::int64_t bytes = 0;
    };
    std::vector<std::deque<Delivery>> m_deliveries;  // per peer, oldest first
    // Per peer: the times of the last few confirmed messages; the least is
    // the link's latency and handshake, which no payload size explains.
    std::vector<std::deque<double>> m_confirmS;
    // Per peer: payloads with a Delivered header started, and confirmed;
    // written under m_mutex, read by the receivers without it (twice a
    // message, on their hot path).
    std::vector<std::atomic<std::int64_t>> m_confirmsStarted, m_confirmsDone;
    std::vector<double> m_reported;     // per peer: the receiver's last estimate, bytes/s
    std::vector<bool> m_closed;
    std::vector<bool> m_peerEvaluating;
    Clock::time_point m_evaluatingSince{};
    double m_evaluatingS = 0;           // closed intervals with a peer evaluating
    double m_waitedOnEvaluationS = 0;  // not yet taken
    std::int64_t m_evaluationAnnounced = -1;
    torch::Tensor m_row;  // the newest control row (undefined: none yet)
    std::int64_t m_rowVersion = 0;
    struct RowSent {
        std::int64_t version = 0;
        Clock::time_point at{};  // when the last row to this peer left
    };
    std::vector<RowSent> m_rowSent;  // per peer
    std::vector<std::int64_t> m_sentBytes;
    std::vector<QByteArray> m_sendKeys, m_receiveKeys;  // per peer
    int m_rejected = 0;
    BandwidthEstimator m_incoming;
    std::exception_ptr m_error;
    bool m_stopping = false;  // threads leave their waits
    bool m_closing = false;   // Bye queued on every link
    int m_byesSent = 0;
    std::vector<std::thread> m_threads;
};

} // namespace dlion::engine
