#include "control_names.h"

#include <array>
#include <utility>

namespace dlion::protocol {

namespace {

constexpr std::array kCommands = {
    std::pair{Command::Stop, "stop"},
    std::pair{Command::Pause, "pause"},
    std::pair{Command::Resume, "resume"},
    std::pair{Command::MergeNow, "merge_now"},
    std::pair{Command::SetSlowdown, "set_slowdown"},
    std::pair{Command::SetLinkCap, "set_link_cap"},
    std::pair{Command::Regroup, "regroup"},
    std::pair{Command::Shutdown, "shutdown"},
    std::pair{Command::Ack, "ack"},
};

constexpr std::array kWorkerStates = {
    std::pair{WorkerState::Idle, "idle"},
    std::pair{WorkerState::Rendezvous, "rendezvous"},
    std::pair{WorkerState::Loading, "loading"},
    std::pair{WorkerState::Regrouping, "regrouping"},
    std::pair{WorkerState::Running, "running"},
    std::pair{WorkerState::Paused, "paused"},
    std::pair{WorkerState::Waiting, "waiting"},
    std::pair{WorkerState::Connecting, "connecting"},
    std::pair{WorkerState::Finished, "finished"},
    std::pair{WorkerState::Failed, "failed"},
    std::pair{WorkerState::Lost, "lost"},
};

template <typename Enum, std::size_t N>
QString nameIn(const std::array<std::pair<Enum, const char *>, N> &table, Enum value)
{
    for (const auto &[e, name] : table) {
        if (e == value)
            return QLatin1String(name);
    }
    return {};
}

template <typename Enum, std::size_t N>
std::optional<Enum> valueIn(const std::array<std::pair<Enum, const char *>, N> &table, const QString &name)
{
    for (const auto &[e, n] : table) {
        if (name == QLatin1String(n))
            return e;
    }
    return std::nullopt;
}

} // namespace

QString commandName(Command command) { return nameIn(kCommands, command); }
std::optional<Command> commandFromName(const QString &name) { return valueIn(kCommands, name); }
QString workerStateName(WorkerState state) { return nameIn(kWorkerStates, state); }
std::optional<WorkerState> workerStateFromName(const QString &name) { return valueIn(kWorkerStates, name); }

} // namespace dlion::protocol
