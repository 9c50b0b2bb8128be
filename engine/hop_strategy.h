#pragma once

#include "strategy.h"

#include <vector>

namespace dlion::engine {

class Mailbox;

// Hop (Luo et al., "Hop: Heterogeneity-aware Decentralized Training",
// ASPLOS 2019), asynchronous. The paper's rule: every worker steps on its
// own gradient, sends its parameters to its out-neighbours and averages with
// what its in-neighbours sent; updates wait in per-neighbour queues, so no
// global barrier exists, and
//   - bounded staleness: worker i may start iteration k only while every
//     in-neighbour has reached iteration k - s (knob `staleness`, s);
//   - backup workers: with b backups (knob `backup`), i proceeds once
//     deg - b in-neighbours satisfy the bound, taking them by arrival;
//   - iteration skipping (knob `skip`): a worker behind all its
//     in-neighbours jumps its iteration count to theirs, so it stops holding
//     the fast ones back.
// Mixing uses the fixed weight 1 / (deg + 1) per neighbour update, each
// update used once; a neighbour with no new update in time gives its weight
// to the worker's own parameters. Every row of the mixing matrix sums to 1;
// while every update arrives (no backups taken) the matrix is the symmetric,
// doubly stochastic one of the topology, and with backups it is doubly
// stochastic in expectation only, as in the paper.
// Deviations: the topology is a ring (both neighbours) or all peers, and
// s = 0 with b = 0 is synchronous D-PSGD.
// Knobs: staleness (default 4), backup (default 0), skip (default false),
// topology ("ring" or "all", default ring).
class HopStrategy : public Strategy {
public:
    HopStrategy(const protocol::JobSpec &spec, Trainer &trainer, Mailbox &mailbox);
    std::int64_t localBatch(const RoundContext &) override { return m_batch; }
    void exchange(torch::Tensor &grad, RoundContext &ctx) override;
    void afterStep(RoundContext &ctx) override;
    std::vector<double> incomingBandwidth() const override;

private:
    Trainer &m_trainer;
    Mailbox &m_mailbox;
    std::int64_t m_batch;
    int m_staleness;
    int m_backup;
    bool m_skip;
    std::vector<int> m_neighbours;  // in- and out-neighbours (symmetric topologies)
    std::int64_t m_iteration = -1;  // -1: not started in this group
};

} // namespace dlion::engine
