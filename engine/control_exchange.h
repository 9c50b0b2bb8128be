#pragma once

#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace dlion::engine {

class Comm;

// All-reduce's per-round agreement: each worker writes its slot, a sum
// all-reduce gives everyone every slot. Flags are agreed when any worker
// raises them, so every worker takes the same decision in the same round.
//
// The slots travel on their own (exchange) or as a block of floats summed
// by a collective that runs anyway (pack, then unpack the summed block):
// all-reduce carries them in its gradient all-reduce, one collective per
// round instead of two. Floats hold every flag and rate exactly enough,
// and a worker's sample count exactly up to 2^24.
class ControlExchange {
public:
    enum Slot { Rate, Samples, Stop, Pause, Merge, Eval, Regroup, SlotCount };

    explicit ControlExchange(Comm &comm);

    // The slots of a group of `world` workers, in values.
    static std::int64_t blockSize(int world) { return std::int64_t(world) * (SlotCount + world); }

    // `incoming`: this worker's estimates of its incoming links (bytes/s).
    void exchange(const double (&mine)[SlotCount], const std::vector<double> &incoming);
    // Writes this worker's slots into `block` (blockSize(world) values of
    // any floating type), zeros elsewhere.
    void pack(const double (&mine)[SlotCount], const std::vector<double> &incoming, torch::Tensor block) const;
    // Takes `block`, summed over the group, as the exchange's result.
    void unpack(const torch::Tensor &block);
    double at(int worker, Slot s) const;
    // n x n matrix of link i -> j bandwidth, as measured by receiver j.
    std::vector<double> bandwidth() const;
    bool any(Slot s) const;
    double sum(Slot s) const;

private:
    Comm &m_comm;
    int m_stride;
    torch::Tensor m_buf;
};

} // namespace dlion::engine
