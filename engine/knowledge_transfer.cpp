#include "knowledge_transfer.h"

#include "comm.h"
#include "link_emulator.h"
#include "trainer.h"

#include <thread>

namespace dlion::engine {

namespace {
// A receiver whose emulated link from the best worker would take longer
// than this to carry the model skips the merge: one model is not worth
// stalling the whole group for (nor tripping its timeout).
constexpr double kMaxModelTransferS = 5.0;
} // namespace

void KnowledgeTransfer::run(Trainer &trainer, Comm &comm, const LinkEmulator &emulator, std::int64_t round, double t,
                            bool manual, const std::function<void(const protocol::MergeEvent &)> &emit)
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
    comm.broadcast(params, best);
    // The best model crosses each emulated link in parallel: wait for the
    // slowest one that can carry it in time.
    double seconds = 0;
    bool reachesMe = true;
    for (int j = 0; j < n; ++j) {
        const double linkS = j == best ? 0 : emulator.transferSeconds(best, j, double(params.numel() * 4), t);
        if (linkS <= kMaxModelTransferS)
            seconds = std::max(seconds, linkS);
        else if (j == me)
            reachesMe = false;
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    if (me == best || mine >= s[best] || !reachesMe)
        return;
    torch::NoGradGuard noGrad;
    merge(trainer.flatParams(), params, m_alpha);
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
