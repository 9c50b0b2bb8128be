#pragma once

#include <torch/types.h>

#include <vector>

namespace dlion::engine {

class Comm;

// The per-round agreement of a group: stop, pause, merge, evaluation and
// regroup flags, and the figures every worker decides from (measured
// compute rates, incoming-link estimates). Each worker writes its row; once
// every row has reached every worker, all take the same decisions without
// further messages.
//
// The rows travel in a collective of their own only where no data moves
// (the first round of a group, pauses). Otherwise they ride in the round's
// own exchange, the gradient all-reduce or the size agreement of the peer-to-peer
// exchange, as real systems piggyback control on data: on a WAN each extra
// collective costs round trips (a ring all-reduce 2(n-1) one-way
// latencies). What round r carried decides at the top of round r + 1.
class ControlExchange {
public:
    enum Slot { Rate, Samples, Stop, Pause, Merge, Eval, Regroup, SlotCount };

    ControlExchange(int rank, int world);

    int world() const { return m_world; }
    // Doubles per row: the slots, then this worker's estimate of each
    // incoming link (bytes/s).
    int stride() const { return m_stride; }

    void setMine(const double (&slots)[SlotCount], const std::vector<double> &incoming);
    // This worker's row, as a carrier sends it.
    const std::vector<double> &mine() const { return m_mine; }
    bool mineRaised(Slot s) const { return m_mine[std::size_t(s)] > 0; }
    // Every worker's row, world x stride, row-major, as a carrier delivered them.
    void accept(const double *rows);
    // A collective of its own: one sum all-reduce of the rows.
    void exchange(Comm &comm);
    // Whether rows were agreed since the last take(); take() starts a round
    // on them.
    bool fresh() const { return m_fresh; }
    void take() { m_fresh = false; }

    double at(int worker, Slot s) const { return m_rows[std::size_t(worker * m_stride + s)]; }
    bool any(Slot s) const;
    double sum(Slot s) const;
    // n x n matrix of link i -> j bandwidth, as measured by receiver j.
    std::vector<double> bandwidth() const;

private:
    int m_rank;
    int m_world;
    int m_stride;
    std::vector<double> m_mine;
    std::vector<double> m_rows;
    bool m_fresh = false;
};

} // namespace dlion::engine
