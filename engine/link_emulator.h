#pragma once

#include <QJsonObject>

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace dlion::engine {

// The emulated micro-cloud: per-directed-link bandwidth caps (Mbit/s) and
// latency, and a schedule that changes link caps or worker slowdowns at
// given training times. Built from the job's "emulation" object:
//
//   links:      "lan" | "lan-hetero" | "wan" | "wan-hetero" | "none" | [[Mbit/s]] (N x N, 0 = uncapped)
//   latency_ms: number, one way, every link (default: the preset's, 0 for a matrix)
//   schedule:   [{"at_s": T, "link": [I, J], "mbps": X},
//                {"at_s": T, "worker": I, "slowdown": F}, ...]
//
// Presets are those of protocol/link_presets.h; "none" (the default) leaves
// links uncapped. Thread-safe.
//
// The emulator plays the network, and only the parts that play it (the
// pacers of payloads and collectives, inside a PacerScope) may read the
// true caps: a strategy decides from what it measured, as it would on real
// links. Reads outside a PacerScope are counted, and the tests require
// none.
class LinkEmulator {
public:
    static constexpr double kUncapped = 0;

    class PacerScope {
    public:
        PacerScope();
        ~PacerScope();
        PacerScope(const PacerScope &) = delete;
        PacerScope &operator=(const PacerScope &) = delete;
    };
    // Cap reads made outside any PacerScope, by every emulator of the process.
    static std::int64_t capReadsOutsidePacer();

    // Throws EngineError naming the field on a bad specification.
    LinkEmulator(const QJsonObject &emulation, int world);

    int world() const { return m_world; }
    bool capped() const;
    // The current group: members[rank] is that rank's worker id. Links are
    // emulated between workers, so capMbps() and transferSeconds() take
    // ranks of the current group; setCap() and the schedule take worker ids.
    void setGroup(std::vector<int> members);
    // Cap of link i -> j (ranks) at training time t (0 = uncapped).
    double capMbps(int from, int to, double t) const;
    double latencyS() const { return m_latencyS; }
    // A cap is the link's line rate, as tc shapes it: TCP/IP over Ethernet
    // carries 1448 payload bytes in a 1514-byte frame (MTU 1500, TCP
    // timestamps on). Without it the emulator ran about 10% faster than tc
    // links (docs/benchmarks.md, emulator calibration).
    static constexpr double kWireOverhead = 1514.0 / 1448.0;
    // Seconds for `bytes` of payload to arrive over link i -> j at time t:
    // latency plus framed bytes / cap (no bandwidth term when uncapped).
    double transferSeconds(int from, int to, double bytes, double t) const;
    // What a collective of `bytes` per rank costs on the current group's
    // links, as Gloo runs it: a ring all-reduce takes 2(n-1) steps, each
    // moving bytes/n over every ring link at once; a broadcast reaches its
    // receivers over their links from the root in parallel (`receivers`
    // empty: every rank).
    double allreduceSeconds(double bytes, double t) const;
    double broadcastSeconds(int root, const std::vector<int> &receivers, double bytes, double t) const;
    // A live override of one link's cap (the user's "set link cap").
    void setCap(int from, int to, double mbps);
    // The slowdown the schedule sets for `worker` at time t, if any event
    // became due in (since, t].
    bool scheduledSlowdown(int worker, double since, double t, double *factor) const;

private:
    int groupSize() const;

    struct Event {
        double atS = 0;
        int from = -1, to = -1;  // link event
        double mbps = 0;
        int worker = -1;         // slowdown event
        double slowdown = 1;
    };

    int m_world;
    double m_latencyS = 0;
    std::vector<double> m_caps;       // world x world, Mbit/s
    std::vector<Event> m_schedule;    // sorted by time
    std::vector<double> m_overrides;  // world x world, < 0 = none
    std::vector<int> m_members;       // rank -> worker id
    mutable std::mutex m_mutex;
};

} // namespace dlion::engine
