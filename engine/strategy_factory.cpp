#include "ako_strategy.h"
#include "allreduce_strategy.h"
#include "dlion_strategy.h"
#include "engine_error.h"
#include "gaia_strategy.h"
#include "hop_strategy.h"
#include "strategy.h"

namespace dlion::engine {

bool exchangesMessages(const QString &strategy) { return strategy != QLatin1String("allreduce"); }

std::unique_ptr<Strategy> makeStrategy(const protocol::JobSpec &spec, Trainer &trainer, Comm &comm,
                                       const LinkEmulator &emulator, Mailbox *mailbox)
{
    if (exchangesMessages(spec.strategy) && !mailbox)
        throw EngineError("strategy " + spec.strategy.toStdString() + " exchanges messages and needs a mailbox");
    const QString &name = spec.strategy;
    if (name == QLatin1String("allreduce"))
        return std::make_unique<AllreduceStrategy>(spec, comm, &trainer);
    if (name == QLatin1String("dlion"))
        return std::make_unique<DlionStrategy>(spec, trainer, *mailbox);
    if (name == QLatin1String("gaia"))
        return std::make_unique<GaiaStrategy>(spec, trainer, *mailbox);
    if (name == QLatin1String("ako"))
        return std::make_unique<AkoStrategy>(spec, trainer, *mailbox);
    if (name == QLatin1String("hop"))
        return std::make_unique<HopStrategy>(spec, trainer, *mailbox);
    throw EngineError("unknown strategy \"" + name.toStdString() + "\" (use allreduce, dlion, gaia, ako or hop)");
}

} // namespace dlion::engine
