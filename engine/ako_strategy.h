#pragma once

#include "peer_exchange.h"
#include "strategy.h"

namespace dlion::engine {

class LinkEmulator;

// Ako (Watcharapichat et al., SoCC 2016): partial gradient exchange. Each
// worker accumulates its gradients, splits the accumulation into p
// partitions and, in round t, sends partition t mod p (dense) to every peer,
// then clears it. It applies its own gradient at once; step: (own +
// received partitions) / workers. p per worker: knob "partitions", or
// chosen from the worker's slowest outgoing link, as measured by its
// receiver, so a partition crosses it within one round of compute ("auto",
// the default). Until every outgoing link is measured, p stays at its
// first value: partitions of about 64 KiB, large enough to be measured.
class AkoStrategy : public Strategy {
public:
    AkoStrategy(const protocol::JobSpec &spec, Trainer &trainer, Comm &comm, const LinkEmulator &emulator);
    std::int64_t localBatch(const RoundContext &) override { return m_batch; }
    void exchange(torch::Tensor &grad, RoundContext &ctx) override;
    std::vector<double> incomingBandwidth() const override { return m_exchange.incomingBandwidth(); }

private:
    std::int64_t partitions(const RoundContext &ctx) const;

    Comm &m_comm;
    std::int64_t m_batch;
    std::int64_t m_fixedPartitions;  // 0 = auto
    std::int64_t m_partitions = 1;
    torch::Tensor m_accumulated;
    PeerExchange m_exchange;
};

} // namespace dlion::engine
