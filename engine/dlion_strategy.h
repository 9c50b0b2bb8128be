#pragma once

#include "knowledge_transfer.h"
#include "residual_top_k.h"
#include "strategy.h"

#include <deque>
#include <map>
#include <set>
#include <vector>

namespace dlion::engine {

class Mailbox;

// DLion (Hong & Chandra, HPDC 2021), each technique switchable:
//
//  wdb          weighted dynamic batching: the global batch B = batch_size x
//               workers is split in proportion to measured compute rates,
//               each share clamped to [min_share, max_share]; gradients are
//               combined weighted by share, so the step averages over B.
//  prioritized  per-link prioritized exchange: link i->j carries the top-k
//               entries that its estimated bandwidth moves within the
//               round's time budget (round_budget_s, default: see
//               roundBudget()); the rest waits in that link's residual. A
//               link that can carry it gets the dense gradient.
//  dkt          direct knowledge transfer every dkt_period rounds, or less
//               often where that keeps its rounds within dkt_share of the
//               training time (and less often while no replica is behind),
//               and on "merge now": replicas more than dkt_margin standard
//               errors behind the best merge it with dkt_alpha. Default
//               margin 0, any replica behind, as in the paper: on
//               wan-hetero Dirichlet(0.3) 1.0 point higher on average than
//               a margin of 1, nothing measurable on wan-hetero iid, about
//               a point lower at 40 s on the iid straggler pair; a
//               pipelined group merges only beyond 1. Default dkt_alpha 1:
//               a replica behind takes the best one's parameters; against
//               0.5, over 8 runs each on wan-hetero Dirichlet(0.3), 1.9
//               points higher on average and 3.3 in the worst replica, 1.2
//               on iid (docs/benchmarks.md).
//  max_growth   dynamic batching beyond the paper's: where a round waits on
//               its links longer than it computes (latency-bound WAN
//               rounds), the global batch grows by a power of two, up to
//               max_growth (default 2), so that the round's compute fills
//               the wait, and the learning rate by its square root. Each
//               worker proposes a growth from its last 15 rounds' wait; the
//               least of round k's proposals, which every payload carries,
//               is every worker's growth after round k + s. Without
//               latency the round computes more than it waits: growth 1.
//               On wan-hetero 85% comes 1.11-1.44x sooner than at a fixed
//               batch; at most 4x ended Dirichlet(0.3) 2.2 points lower
//               (docs/benchmarks.md).
//  pipeline     where every link carries the dense gradient and the
//               round still waits less than it computes (fast links, as a
//               straggler pair's), the group runs one
//               round stale (s = 1, below), so that the exchange runs
//               during the next round's compute; agreed as growth is, and
//               only at growth 1 and knob staleness 0. It stays pipelined
//               while the wait its compute does not hide is under half of
//               that compute and most of its recent payloads went dense.
//               On the straggler pair (no caps, 3 seeds) throughput is
//               1.89x all-reduce's (1.62x unpipelined), and 85% comes 1.36x
//               sooner (1.11x); on wan-hetero its payloads are sparse and
//               its rounds wait too long (docs/benchmarks.md).
//
// Rounds are kept by messages rather than collectives: each worker sends
// every peer its round's payload (an empty one still carries its header,
// which holds the sender's batch share and a merge request) and steps once
// every peer's payload of round k - s has arrived (knob `staleness`, s,
// default 0: fully synchronous); with s >= 1 a round's exchange overlaps
// the next rounds' compute, which on WAN links hides their latency. No
// agreement precedes a round: the step combines every payload that is in,
// each once, weighted by the share its sender actually computed, so it is
// the step over the global batch whatever each worker believed of the
// others' rates. Synchronous by default, as in the paper: weighted dynamic
// batching makes every worker's round equally long, so the wait is mostly
// the links', and it keeps the replicas close and DKT's rounds agreed.
// s = 1 runs a payload's path during the next round's compute: on
// wan-hetero DLion trains twice as fast, but at momentum 0.9 ends 2.4
// to 2.6 points lower; at 0.6 it ends 0.7 to 0.9 points higher than the
// default and reaches 80% no sooner (docs/benchmarks.md). Hence knob
// `pipeline`: one round stale only where the links are fast enough for
// the compute to hide them.
//
// Knobs: wdb, prioritized, dkt, pipeline (bool, default true), min_share
// (default batch_size/8), max_share (default 4 x batch_size),
// round_budget_s, dkt_period (50), dkt_share (0.1), dkt_alpha (1),
// dkt_margin (0), heldout_samples (500), staleness (0), max_growth (2).
class DlionStrategy : public Strategy {
public:
    DlionStrategy(const protocol::JobSpec &spec, Trainer &trainer, Mailbox &mailbox);
    std::int64_t localBatch(const RoundContext &ctx) override;
    void exchange(torch::Tensor &grad, RoundContext &ctx) override;
    std::vector<double> incomingBandwidth() const override;
    void afterStep(RoundContext &ctx) override;
    // The rounds a step may lag its payloads by now (knob, or pipelining).
    std::int64_t staleness() const { return m_pipelined ? 1 : m_staleness; }

    // What a worker proposes for the group's next rounds.
    struct Proposal {
        std::int64_t growth = 1;
        bool pipeline = false;
    };

private:
    // The link to `peer` as its receiver measured it, bytes/s (0: unknown).
    double measuredBps(int peer, const RoundContext &ctx) const;
    // Entries to send to `peer` this round (0: none, the residual keeps them).
    std::int64_t linkBudget(int peer, double roundSeconds, const RoundContext &ctx);
    // The time each link may carry this round's payload: the slowest
    // share's expected compute time, or half the time a round takes beyond
    // its own payloads' transfer (measured: its latency, compute and
    // processing), whichever is longer. The paper's budget is the compute
    // time; on links with latency the round lasts several times that
    // whatever is sent, so a payload sized by compute alone left the links
    // idle most of the round: on wan-hetero (25 ms one way, about 8 ms of
    // compute) DLion sent a tenth of Ako's bytes. With this budget iid
    // reached 85% after 26.1 s instead of 36.0, Dirichlet(0.3) 80% after
    // 24.0 s instead of 30.0; a fixed 60 ms cost more rounds than its
    // entries gained (docs/benchmarks.md).
    // It also records the round's wait beyond its compute and updates this
    // worker's growth proposal from it.
    double roundBudget(const RoundContext &ctx);
    // `proposal` was made in `round`; the least proposal of a round wins.
    void noteProposal(std::int64_t round, Proposal proposal);

    Trainer &m_trainer;
    Mailbox &m_mailbox;
    bool m_wdb, m_prioritized, m_dkt;
    std::int64_t m_batch, m_minShare, m_maxShare, m_maxGrowth;
    double m_roundBudgetS;
    KnowledgeTransfer m_transfer;
    ResidualTopK m_topk;
    std::vector<std::int64_t> m_shares;
    std::vector<double> m_credit;  // per peer: entries earned, not yet sent
    std::int64_t m_staleness;
    std::deque<bool> m_dense;  // recent rounds: whether their payloads all went dense
    bool m_pipeline;         // knob pipeline, and staleness 0
    bool m_pipelined = false;  // agreed: this round runs one round stale
    std::deque<double> m_fixedS;  // recent rounds' time beyond their transfer
    std::deque<double> m_waitS;   // ... and beyond their compute as well
    std::int64_t m_growth = 1;       // the global batch's growth, agreed
    std::int64_t m_roundGrowth = 1;  // ... that this round's shares were computed at
    Proposal m_proposal;             // this worker's, from its rounds
    std::map<std::int64_t, Proposal> m_proposals;  // round -> least proposal seen
    double m_roundStartS = -1;    // when the last round started (training time)
    double m_sendS = 0;           // the longest its payloads were to occupy a link
    std::set<std::int64_t> m_mergeRounds;  // rounds whose payloads asked for a merge
    bool m_mergeNow = false;               // ... and one of them is due now
};

} // namespace dlion::engine
