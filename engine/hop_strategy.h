#pragma once

#include "peer_exchange.h"
#include "strategy.h"

#include <vector>

namespace dlion::engine {

class LinkEmulator;

// Hop (Luo et al., ASPLOS 2019), decentralized training without a global
// reduction: each worker steps on its own gradient, then averages its
// parameters with its neighbours on a ring (or all peers). With `backup`
// backup workers, a worker averages with only its fastest deg - backup
// neighbours (by link speed), so it never waits for the slowest links.
// Rounds are lock-step in this engine (staleness 0): the bounded-staleness
// variant that lets fast workers run ahead is not implemented.
// Knobs: backup (default 0), topology ("ring" or "all", default ring).
class HopStrategy : public Strategy {
public:
    HopStrategy(const protocol::JobSpec &spec, Trainer &trainer, Comm &comm, const LinkEmulator &emulator);
    std::int64_t localBatch(const RoundContext &) override { return m_batch; }
    void exchange(torch::Tensor &grad, RoundContext &ctx) override;
    void afterStep(RoundContext &ctx) override;
    std::vector<double> incomingBandwidth() const override { return m_exchange.incomingBandwidth(); }

private:
    // The neighbours whose parameters `worker` averages with at time t.
    std::vector<int> inNeighbours(int worker, const std::vector<double> &bandwidth) const;

    Trainer &m_trainer;
    Comm &m_comm;
    std::int64_t m_batch;
    int m_backup;
    bool m_ring;
    PeerExchange m_exchange;
};

} // namespace dlion::engine
