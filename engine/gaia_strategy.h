#pragma once

#include "peer_exchange.h"
#include "strategy.h"

namespace dlion::engine {

class LinkEmulator;

// Gaia (Hsieh et al., NSDI 2017), decentralized form: each worker applies
// its own gradient at once and shares with every peer only the significant
// part of its accumulated update, entries where |lr * u| / |w| exceeds
// `threshold` (default 0.01, Gaia's 1%); the rest keeps accumulating in u
// until it becomes significant. Step: (own + received) / workers.
// Knobs: threshold.
class GaiaStrategy : public Strategy {
public:
    GaiaStrategy(const protocol::JobSpec &spec, Trainer &trainer, Comm &comm, const LinkEmulator &emulator);
    std::int64_t localBatch(const RoundContext &) override { return m_batch; }
    void exchange(torch::Tensor &grad, RoundContext &ctx) override;
    std::vector<double> incomingBandwidth() const override { return m_exchange.incomingBandwidth(); }

private:
    Trainer &m_trainer;
    std::int64_t m_batch;
    double m_lr, m_threshold;
    torch::Tensor m_accumulated;
    PeerExchange m_exchange;
};

} // namespace dlion::engine
