#pragma once

#include <telemetry.h>

#include <torch/types.h>

#include <algorithm>
#include <functional>
#include <vector>

namespace dlion::engine {

class Mailbox;
class Trainer;
struct RoundContext;

// Direct knowledge transfer: workers score their replicas on the held-out
// batch they all share; every worker weaker than the best one pulls its
// parameters and buffers (BatchNorm statistics) towards the best:
// w <- (1 - alpha) w + alpha w_best. The strategy's default alpha is 1, the
// best replica's parameters taken whole: halfway (0.5) left the replicas of
// skewed data apart between transfers, about 2 points lower on average on
// wan-hetero Dirichlet(0.3) (docs/benchmarks.md).
// Every worker calls run() in the same round: the scores go to every peer,
// and the best worker sends its model to each peer that merges, or an empty
// message to one whose link is too slow for it, so every worker knows what
// to wait for.
//
// A replica merges when it trails the best by more than `margin`
// standard errors of the difference of two accuracies on the held-out
// batch (unpaired, so an upper bound); the strategy's default margin is 0,
// any replica behind. One standard error (2.3 points at 85% on 500
// samples) kept iid replicas, which stay within a point, from merging, but
// on non-iid data it also let the replicas drift apart: frequent small
// merges ended Dirichlet(0.3) a point higher on average, cost wan-hetero
// iid nothing measurable and the iid straggler pair about a point at 40 s
// (docs/benchmarks.md). Every worker holds the same scores, so all know
// who merges without a message. A manual merge ("merge now") merges every
// replica behind the best.
//
// Schedule: at most every `period` rounds, and no more often than keeps
// DKT's rounds within `share` of the training time. Each score carries
// what the sender's last transfer cost and how long its rounds took since;
// every worker computes the next DKT round from the same numbers, so all
// agree on it without a message of its own. (A period in rounds alone
// made DKT cost more as compute got faster: on a fast CPU it took a fifth
// of a straggler pair's time.) A transfer in which no replica merged
// doubles the gap to the next, up to kMostBackoff times; a merge resets it.
class KnowledgeTransfer {
public:
    KnowledgeTransfer(double alpha, std::int64_t heldOutSamples, std::int64_t period = 50, double share = 1,
                      double margin = 0)
        : m_alpha(alpha), m_heldOut(heldOutSamples), m_period(period), m_share(share), m_margin(margin),
          m_next(period - 1)
    {}
    static constexpr std::int64_t kMostBackoff = 8;

    static void merge(torch::Tensor &weights, const torch::Tensor &best, double alpha)
    {
        weights.mul_(1 - alpha).add_(best, alpha);
    }

    // A worker whose link from the best one would take over 5 s to carry
    // the model, as measured (ctx.bandwidth, bytes/s), or is not measured
    // yet, sits the merge out.
    // `stale`: the group runs a round stale (pipelined), see marginFor().
    void run(Trainer &trainer, Mailbox &mailbox, const RoundContext &ctx, bool manual, bool stale = false);
    // The margin a transfer merges beyond. A stale group's replicas differ
    // by the round in flight, which each will still apply: merging that
    // difference would count the part taken (alpha) twice, so while stale a
    // replica merges only beyond the held-out noise, one standard error. (On the
    // pipelined straggler pair, margin 0 merged at every transfer: 54-60
    // times in 40 s; this rule: 8-9.)
    static double marginFor(double margin, bool stale) { return stale ? std::max(margin, 1.0) : margin; }
    // Whether the schedule (above) runs a transfer after `round`.
    bool due(std::int64_t round) const { return round >= m_next; }
    // Whether run() ran after `round`, the last time it ran.
    bool ranAfter(std::int64_t round) const { return m_endedRound >= 0 && m_endedRound == round; }
    // The rounds from one transfer to the next when each took `costS`
    // and the rounds between took `roundS`.
    static std::int64_t gapRounds(std::int64_t period, double share, double costS, double roundS);
    // Whether a replica scoring `mine` merges towards one scoring `best`,
    // both accuracies on the same `samples` held-out samples.
    static bool behind(double best, double mine, std::int64_t samples, double margin);

private:
    // The transfer itself; `roundS` as in the score (above).
    void transfer(Trainer &trainer, Mailbox &mailbox, const RoundContext &ctx, bool manual, double margin,
                  double roundS);

    double m_alpha;
    std::int64_t m_heldOut;
    std::int64_t m_period;
    double m_share;
    double m_margin;
    std::int64_t m_next;        // the next scheduled round
    std::int64_t m_backoff = 1; // the gap's multiple: doubled by a transfer without merges
    double m_costS = 0;         // what the last run() took (0: none yet)
    double m_endedAtS = -1;     // training time when it ended
    std::int64_t m_endedRound = -1;
};

} // namespace dlion::engine
