#include "knowledge_transfer.h"

#include "mailbox.h"
#include "sparse_codec.h"
#include "strategy.h"
#include "trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace dlion::engine {

namespace {
// A receiver whose emulated link from the best worker would take longer
// than this to carry the model skips the merge: one model is not worth
// stalling the whole group for (nor tripping its timeout).
constexpr double kMaxModelTransferS = 5.0;
} // namespace

std::int64_t KnowledgeTransfer::gapRounds(std::int64_t period, double share, double costS, double roundS)
{
    if (costS <= 0 || roundS <= 0 || share <= 0)
        return period;
    constexpr double kMostRounds = 1e9;
    return std::max(period, std::int64_t(std::min(kMostRounds, std::ceil(costS / (share * roundS)))));
}

bool KnowledgeTransfer::behind(double best, double mine, std::int64_t samples, double margin)
{
    if (samples <= 0)
        return false;
    const double standardError = std::sqrt((best * (1 - best) + mine * (1 - mine)) / double(samples));
    return best - mine > margin * standardError;
}

void KnowledgeTransfer::run(Trainer &trainer, Mailbox &mailbox, const RoundContext &ctx, bool manual, bool stale)
{
    const auto started = std::chrono::steady_clock::now();
    // This worker's training time per round since the last transfer, which
    // that transfer's own time is taken out of.
    const double roundS = m_endedRound >= 0 && ctx.round > m_endedRound
        ? std::max(0.0, ctx.elapsedS - m_endedAtS - m_costS) / double(ctx.round - m_endedRound)
        : 0.0;
    transfer(trainer, mailbox, ctx, manual, marginFor(m_margin, stale), roundS);
    m_costS = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    m_endedAtS = ctx.elapsedS;
    m_endedRound = ctx.round;
}

void KnowledgeTransfer::transfer(Trainer &trainer, Mailbox &mailbox, const RoundContext &ctx, bool manual, double margin,
                                 double roundS)
{
    const int n = mailbox.world(), me = mailbox.rank();
    if (n < 2) {
        m_next = ctx.round + m_period;  // alone: nothing to transfer, no one to agree with
        return;
    }
    // A `kind` message of this round from `from`, or from every peer (-1).
    auto heard = [&](Mailbox::Kind kind, int from) {
        std::vector<std::int64_t> need(std::size_t(n), -1);
        for (int j = 0; j < n; ++j) {
            if (j != me && (from < 0 || j == from))
                need[std::size_t(j)] = ctx.round;
        }
        return mailbox.waitForRounds(kind, need, ctx.keepWaiting);
    };
    std::vector<double> scores(std::size_t(n), 0.0);
    const EvalResult own = trainer.evaluateHeldOut(m_heldOut);
    scores[std::size_t(me)] = own.accuracy();
    mailbox.sendToPeers(Mailbox::Kind::Score, ctx.round, Mailbox::packDoubles({scores[std::size_t(me)], m_costS, roundS}),
                        ctx.elapsedS);
    if (!heard(Mailbox::Kind::Score, -1))
        return;  // leaving the group
    // Every worker holds the same figures, so all pick the same next
    // round and the same replicas to merge. A transfer's cost is the least
    // any worker spent in it: the others' time includes waiting for the
    // last to arrive, which the next round's exchange would have spent
    // anyway.
    double costS = m_costS, slowestRoundS = roundS;
    for (const auto &m : mailbox.take(Mailbox::Kind::Score, ctx.round)) {
        const auto v = Mailbox::unpackDoubles(m.payload);
        if (m.round != ctx.round || v.size() < 3)
            continue;
        scores[std::size_t(m.from)] = v[0];
        costS = std::min(costS, v[1]);
        slowestRoundS = std::max(slowestRoundS, v[2]);
    }
    const int best = int(std::max_element(scores.begin(), scores.end()) - scores.begin());
    const double bestScore = scores[std::size_t(best)];
    std::vector<bool> merges(std::size_t(n), false);
    for (int j = 0; j < n; ++j) {
        const double score = scores[std::size_t(j)];
        merges[std::size_t(j)] = j != best && (manual ? score < bestScore : behind(bestScore, score, own.count, margin));
    }
    const bool anyMerges = std::find(merges.begin(), merges.end(), true) != merges.end();
    m_backoff = anyMerges ? 1 : std::min(kMostBackoff, 2 * m_backoff);
    m_next = ctx.round + m_backoff * gapRounds(m_period, m_share, costS, slowestRoundS);
    if (me == best) {
        const torch::Tensor model = sparse_codec::encode({torch::Tensor(), trainer.flatState(), trainer.stateCount(), 0});
        // The freshest view of the outgoing links: this round's payloads may
        // have just found one slower than its receiver has reported yet.
        std::vector<double> reported(std::size_t(n), 0.0);
        if (!ctx.bandwidth.empty())
            std::copy_n(ctx.bandwidth.begin() + me * n, n, reported.begin());
        const std::vector<double> outgoing = mailbox.outgoingEstimate(reported);
        for (int j = 0; j < n; ++j) {
            if (!merges[std::size_t(j)])
                continue;
            // A link not measured yet is not trusted with the model.
            const double bps = outgoing[std::size_t(j)];
            const bool carries = bps > 0 && double(model.numel() * 4) / bps <= kMaxModelTransferS;
            mailbox.send(j, Mailbox::Kind::Model, ctx.round, carries ? model : torch::Tensor(), ctx.elapsedS);
        }
        return;
    }
    if (!merges[std::size_t(me)] || !heard(Mailbox::Kind::Model, best))
        return;
    torch::Tensor state;  // the best replica's parameters and buffers
    for (const auto &m : mailbox.take(Mailbox::Kind::Model, ctx.round)) {
        if (m.round == ctx.round && m.from == best && m.payload.numel() > 0)
            state = sparse_codec::decodeFor(m.payload, trainer.stateCount()).values;
    }
    if (!state.defined())
        return;
    torch::NoGradGuard noGrad;
    merge(trainer.flatState(), state, m_alpha);
    // The merged replica's velocity would be (1 - alpha) this one's plus
    // alpha the best one's, which is not sent (it would double the
    // transfer). Replicas that train on the same model move alike, so this
    // one's velocity stands in for it, and is kept whole. Keeping only
    // (1 - alpha) of it, as if the best one's were zero, halved the
    // momentum at every merge: on wan-hetero Dirichlet(0.3) DLion reached
    // 80% after 32.1 s instead of 26.0, and at staleness 1 iid reached 85%
    // after 46-48 s instead of 38-40 (docs/benchmarks.md).
    if (ctx.emitMerge) {
        protocol::MergeEvent e;
        e.round = ctx.round;
        e.t = ctx.elapsedS;
        e.from = best;
        e.to = me;
        e.scoreBefore = scores[std::size_t(me)];
        e.scoreFrom = bestScore;
        e.alpha = m_alpha;
        e.manual = manual;
        ctx.emitMerge(e);
    }
}

} // namespace dlion::engine
