#pragma once

#include <QJsonObject>

#include <mutex>
#include <string>
#include <vector>

namespace dlion::engine {

// The emulated micro-cloud: per-directed-link bandwidth caps (Mbit/s) and
// latency, and a schedule that changes link caps or worker slowdowns at
// given training times. Built from the job's "emulation" object:
//
//   links:      "lan" | "lan-hetero" | "wan" | "wan-hetero" | "none" | [[Mbit/s]] (N x N, 0 = uncapped)
//   latency_ms: number (every link)
//   schedule:   [{"at_s": T, "link": [I, J], "mbps": X},
//                {"at_s": T, "worker": I, "slowdown": F}, ...]
//
// Presets are those of protocol/link_presets.h; "none" (the default) leaves
// links uncapped. Thread-safe.
class LinkEmulator {
public:
    static constexpr double kUncapped = 0;

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
    // Seconds to push `bytes` over link i -> j at time t (0 when uncapped).
    double transferSeconds(int from, int to, double bytes, double t) const;
    // A live override of one link's cap (the user's "set link cap").
    void setCap(int from, int to, double mbps);
    // The slowdown the schedule sets for `worker` at time t, if any event
    // became due in (since, t].
    bool scheduledSlowdown(int worker, double since, double t, double *factor) const;

private:
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
