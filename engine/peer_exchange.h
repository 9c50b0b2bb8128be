#pragma once

#include "bandwidth_estimator.h"
#include "link_pacer.h"
#include "sparse_codec.h"

#include <telemetry.h>

#include <vector>

namespace dlion::engine {

class Comm;
class LinkEmulator;

// All-to-all exchange of per-peer gradient payloads over c10d point-to-point,
// paced by the link emulator and measured per link.
//
// One round: payload sizes are agreed with one small all-reduce (which also
// aligns the start); receives are posted for every peer; sends go out when
// their emulated link would have delivered them (parallel links, each
// queued behind its previous transfer). Each receiver times the arrival of
// every payload: that is the incoming-link bandwidth estimate, which workers
// share through the round's control exchange so that a sender knows its
// outgoing links. An empty payload costs nothing: it does not go on the
// wire. Payloads that fail to decode raise EngineError.
class PeerExchange {
public:
    PeerExchange(Comm &comm, const LinkEmulator &emulator);

    // out[j] goes to peer j (out[rank] is ignored); returns what each peer
    // sent to us (entry rank empty). `t` is the training time (for schedules).
    // With `deadlineS` > 0 every payload streams its entries largest first
    // and stops when the deadline passes, as a sender bounded by a deadline
    // does on a real link: the entries the link would not have carried in
    // time stay behind and come back in (*undelivered)[j].
    std::vector<SparseGradient> exchange(const std::vector<SparseGradient> &out, double t, double deadlineS = 0,
                                         std::vector<SparseGradient> *undelivered = nullptr);

    // Sends the same payload to every peer and turns `grad` into the mean
    // of it and everything received ((own + received) / workers), filling
    // the round's per-link telemetry. Gaia and Ako share this step.
    void shareAndAverage(const SparseGradient &payload, torch::Tensor &grad, protocol::RoundRecord &record,
                         const std::vector<double> &bandwidth, double t);

    // Estimated bytes/s of each incoming link (peer -> this worker).
    std::vector<double> incomingBandwidth() const;
    // Fills a round's outgoing-link estimates (from the shared n x n
    // `bandwidth` matrix, bytes/s) and the bytes sent.
    void report(protocol::RoundRecord &record, const std::vector<double> &bandwidth) const;
    // Bytes this worker put on each link in the last exchange.
    const std::vector<std::int64_t> &lastBytes() const { return m_lastBytes; }

private:
    // The most sparse entries (index + value) whose payload the emulated
    // link to `peer` delivers within `seconds` at training time `t`
    // (unbounded when the link is uncapped; 0 when not even a header fits).
    // The network's knowledge: only the pacer calls it.
    std::int64_t entriesWithin(int peer, double seconds, double t) const;

    Comm &m_comm;
    const LinkEmulator &m_emulator;
    LinkPacer m_pacer;
    BandwidthEstimator m_incoming;
    std::vector<std::int64_t> m_lastBytes;
};

} // namespace dlion::engine
