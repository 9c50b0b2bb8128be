#include "gaia_strategy.h"

#include "mailbox.h"
#include "sparse_codec.h"
#include "strategy_options.h"
#include "trainer.h"

namespace dlion::engine {

GaiaStrategy::GaiaStrategy(const protocol::JobSpec &spec, Trainer &trainer, Mailbox &mailbox)
    : m_trainer(trainer), m_mailbox(mailbox), m_batch(spec.batchSize),
      m_before(torch::zeros({trainer.parameterCount()})), m_accumulated(torch::zeros({trainer.parameterCount()}))
{
    const StrategyOptions o(spec.strategyOptions, spec.strategy);
    m_threshold = o.number("threshold");
}

std::vector<double> GaiaStrategy::incomingBandwidth() const { return m_mailbox.incomingBandwidth(); }

void GaiaStrategy::exchange(torch::Tensor &grad, RoundContext &)
{
    m_before.copy_(m_trainer.flatParams());
    // Every update reaches every replica, each from batch_size samples: the
    // job's rate is for the global batch, so each is stepped at lr / workers.
    grad.div_(m_mailbox.world());
}

void GaiaStrategy::afterStep(RoundContext &ctx)
{
    const int n = m_mailbox.world(), me = m_mailbox.rank();
    torch::NoGradGuard noGrad;
    auto &w = m_trainer.flatParams();
    m_accumulated.add_(w).sub_(m_before);
    const auto significant = m_accumulated.abs() > w.abs() * m_threshold;
    const std::int64_t count = significant.sum().item<std::int64_t>();
    if (count > 0 && n > 1) {
        SparseGradient update;
        update.length = w.numel();
        // Dense when an index list would cost more than the values it saves.
        const bool dense = 2 * count > w.numel();
        if (dense) {
            update.values = m_accumulated.clone();
            m_accumulated.zero_();
        } else {
            update.indices = significant.nonzero().flatten();
            update.values = m_accumulated.index_select(0, update.indices);
            m_accumulated.index_fill_(0, update.indices, 0.0);
        }
        // An update the link has not started yet absorbs this one.
        for (int j = 0; j < n; ++j) {
            if (j == me)
                continue;
            if (dense)
                m_mailbox.send(j, Mailbox::Kind::Barrier, ctx.round, {}, ctx.elapsedS);
            m_mailbox.sendGradient(j, ctx.round, update, ctx.elapsedS, Mailbox::Pending::Add);
        }
    }

    // Selective barrier: wait for every announced dense update.
    std::vector<std::int64_t> awaited(std::size_t(n), -1);
    for (const auto &b : m_mailbox.take(Mailbox::Kind::Barrier))
        awaited[std::size_t(b.from)] = std::max(awaited[std::size_t(b.from)], b.round);
    m_mailbox.waitForRounds(Mailbox::Kind::Data, awaited, ctx.keepWaiting);
    for (const auto &m : m_mailbox.take(Mailbox::Kind::Data))
        sparse_codec::decodeFor(m.payload, w.numel()).addTo(w, 1.0);

    ctx.record->linkFraction.assign(std::size_t(n), double(count) / double(w.numel()));
    ctx.record->linkFraction[std::size_t(me)] = 0;
    m_mailbox.report(*ctx.record, ctx.bandwidth);
}

} // namespace dlion::engine
