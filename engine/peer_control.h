#pragma once

#include <telemetry.h>

#include <cstdint>
#include <deque>
#include <vector>

namespace dlion::engine {

// A message-passing group's control rows: each worker sends its row to
// every peer at least every few hundred milliseconds, and each worker keeps
// the newest row of every peer, which stands in for all-reduce's per-round
// ControlExchange. A row is SlotCount numbers followed by the worker's
// estimates of its incoming links (bytes/s, one per rank).
//   Stop     ends the group's training for all (a stop request, the
//            target, the epoch budget);
//   Done     this worker has spent its own time or rounds budget and waits
//            for the others to spend theirs: every worker gets the same
//            training time, whatever its peers' evaluations cost;
//   Regroup  a new group plan is pending.
class ControlRows {
public:
    enum Slot { Rate, Samples, Stop, Done, Regroup, SlotCount };

    ControlRows(int world, int rank);

    // A row as received; a short or long one is padded or cut to size.
    void set(int rank, std::vector<double> row);
    const std::vector<double> &row(int rank) const { return m_rows[std::size_t(rank)]; }
    double at(int rank, Slot s) const { return m_rows[std::size_t(rank)][s]; }
    bool any(Slot s) const;
    bool all(Slot s) const;
    // The peers' figure plus `own` for this worker (whose row may be older).
    double sumWithOwn(Slot s, double own) const;
    // n x n matrix of link i -> j bandwidth, as measured by receiver j.
    std::vector<double> bandwidth() const;

private:
    int m_world, m_rank;
    std::vector<std::vector<double>> m_rows;
};

// Rank 0's view of the replicas' evaluations: each worker scores its
// replica when its own clock passes a multiple of the interval and sends
// (index, accuracy, loss, time); an index is reported once every replica
// has reached it.
class EvalCollector {
public:
    explicit EvalCollector(int world) : m_byRank(std::size_t(world)) {}

    void add(int rank, std::int64_t index, double accuracy, double loss, double t);
    // Mean, min and max over the replicas' first evaluations at or after
    // the newest index that all have reached, once per index; its time is
    // the latest of theirs, so time to accuracy is never early.
    bool next(protocol::EvalRecord &e);

private:
    struct Entry {
        std::int64_t index;
        double accuracy, loss, t;
    };
    std::vector<std::deque<Entry>> m_byRank;
    std::int64_t m_reported = -1;
};

} // namespace dlion::engine
