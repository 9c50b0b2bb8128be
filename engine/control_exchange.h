#pragma once

#include <torch/types.h>

#include <vector>

namespace dlion::engine {

class Comm;

// All-reduce's per-round agreement: each worker writes its slot, a sum
// all-reduce gives everyone every slot. Flags are agreed when any worker
// raises them, so every worker takes the same decision in the same round.
class ControlExchange {
public:
    enum Slot { Rate, Samples, Stop, Pause, Merge, Eval, Regroup, SlotCount };

    explicit ControlExchange(Comm &comm);

    // `incoming`: this worker's estimates of its incoming links (bytes/s).
    void exchange(const double (&mine)[SlotCount], const std::vector<double> &incoming);
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
