#include "allreduce_strategy.h"
#include "engine_error.h"
#include "strategy.h"

namespace dlion::engine {

std::unique_ptr<Strategy> makeStrategy(const protocol::JobSpec &spec, Trainer &, Comm &comm)
{
    if (spec.strategy == QLatin1String("allreduce"))
        return std::make_unique<AllreduceStrategy>(spec, comm);
    throw EngineError("strategy \"" + spec.strategy.toStdString() + "\" is not available in this engine build");
}

} // namespace dlion::engine
