#pragma once

#include "knowledge_transfer.h"
#include "peer_exchange.h"
#include "residual_top_k.h"
#include "strategy.h"

#include <vector>

namespace dlion::engine {

class LinkEmulator;

// DLion (Hong & Chandra, HPDC 2021), each technique switchable:
//
//  wdb          weighted dynamic batching: the global batch B = batch_size x
//               workers is split in proportion to measured compute rates,
//               each share clamped to [min_share, max_share]; gradients are
//               combined weighted by share, so the step averages over B.
//  prioritized  per-link prioritized exchange: link i->j carries the top-k
//               entries that its estimated bandwidth moves within the
//               round's time budget (round_budget_s, default: the round's
//               expected compute time); the rest waits in that link's
//               residual. A link that can carry it gets the dense gradient.
//  dkt          direct knowledge transfer every dkt_period rounds and on
//               "merge now": weaker replicas merge the best with dkt_alpha.
//
// Knobs: wdb, prioritized, dkt (bool, default true), min_share (default
// batch_size/8), max_share (default 4 x batch_size), round_budget_s,
// dkt_period (50), dkt_alpha (0.5), heldout_samples (500).
class DlionStrategy : public Strategy {
public:
    DlionStrategy(const protocol::JobSpec &spec, Trainer &trainer, Comm &comm, const LinkEmulator &emulator);
    std::int64_t localBatch(const RoundContext &ctx) override;
    void exchange(torch::Tensor &grad, RoundContext &ctx) override;
    std::vector<double> incomingBandwidth() const override { return m_exchange.incomingBandwidth(); }
    void afterStep(RoundContext &ctx) override;

private:
    // Entries to send to `peer` this round (0: none, the residual keeps them).
    std::int64_t linkBudget(int peer, double roundSeconds, const RoundContext &ctx);

    Trainer &m_trainer;
    Comm &m_comm;
    bool m_wdb, m_prioritized, m_dkt;
    std::int64_t m_batch, m_minShare, m_maxShare;
    double m_roundBudgetS;
    std::int64_t m_dktPeriod;
    KnowledgeTransfer m_transfer;
    PeerExchange m_exchange;
    ResidualTopK m_topk;
    std::vector<std::int64_t> m_shares;
    std::vector<double> m_credit;  // per peer: entries earned, not yet sent
};

} // namespace dlion::engine
