#include "knowledge_transfer.h"

#include "comm.h"
#include "trainer.h"

#include <algorithm>

namespace dlion::engine {

namespace {
// A receiver whose emulated link from the best worker would take longer
// than this to carry the model skips the merge: one model is not worth
// stalling the whole group for (nor tripping its timeout).
constexpr double kMaxModelTransferS = 5.0;
} // namespace

void KnowledgeTransfer::run(Trainer &trainer, Comm &comm, const std::vector<double> &bandwidth, std::int64_t round,
                            double t, bool manual, const std::function<void(const protocol::MergeEvent &)> &emit)
{
    const int n = comm.world(), me = comm.rank();
    if (n < 2)
        return;
    const double mine = trainer.evaluateHeldOut(m_heldOut).accuracy();
    auto scores = torch::zeros({n}, torch::kDouble);
    scores.data_ptr<double>()[me] = mine;
    comm.allreduceSum(scores);
    const auto *s = scores.data_ptr<double>();
    int best = 0;
    for (int j = 1; j < n; ++j) {
        if (s[j] > s[best])
            best = j;
    }
    auto params = me == best ? trainer.flatParams().clone() : torch::empty_like(trainer.flatParams());
    // The receivers are those whose link from the best worker, as measured,
    // carries the model in time; a link not measured yet is not trusted.
    // Every worker decides alike from the shared matrix.
    std::vector<int> receivers;
    for (int j = 0; j < n; ++j) {
        const double bps = bandwidth.empty() ? 0 : bandwidth[std::size_t(best * n + j)];
        if (j != best && bps > 0 && double(params.numel() * 4) / bps <= kMaxModelTransferS)
            receivers.push_back(j);
    }
    if (!receivers.empty())
        comm.broadcast(params, best, receivers);
    if (me == best || mine >= s[best] || std::find(receivers.begin(), receivers.end(), me) == receivers.end())
        return;
    torch::NoGradGuard noGrad;
    merge(trainer.flatParams(), params, m_alpha);
    // The merged replica is (1 - alpha) this one plus alpha the best. The
    // best one's momentum is not sent (it would double the transfer), so
    // only this replica's share of its own velocity is kept: the full
    // velocity would keep pushing the merged weights along the path the
    // merge just corrected.
    trainer.flatMomentum().mul_(1 - m_alpha);
    if (emit) {
        protocol::MergeEvent e;
        e.round = round;
        e.t = t;
        e.from = best;
        e.to = me;
        e.scoreBefore = mine;
        e.scoreFrom = s[best];
        e.alpha = m_alpha;
        e.manual = manual;
        emit(e);
    }
}

} // namespace dlion::engine
