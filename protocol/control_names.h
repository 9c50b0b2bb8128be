#pragma once
// The names of control commands and worker states on the wire, each in one
// table (control_names.cpp) that both sides use.
#include <QString>

#include <optional>

namespace dlion::protocol {

// Controller -> agent, in a Command frame's "cmd" field.
enum class Command {
    Stop,
    Pause,
    Resume,
    MergeNow,
    SetSlowdown,  // {value: factor >= 1}
    SetLinkCap,   // {peer, mbps}
    Regroup,      // {plan: GroupPlan}
    Shutdown,
    Ack,          // {seq}: telemetry up to seq arrived
};

// What a worker is doing. The agent reports the first ones in Status and
// Heartbeat frames; the controller adds the ones after Waiting.
enum class WorkerState {
    Idle,
    Rendezvous,
    Loading,
    Regrouping,
    Running,
    Paused,
    Waiting,  // its budget spent, waiting for the others
    Connecting,
    Finished,
    Failed,
    Lost,
};

QString commandName(Command command);
std::optional<Command> commandFromName(const QString &name);
QString workerStateName(WorkerState state);
std::optional<WorkerState> workerStateFromName(const QString &name);

} // namespace dlion::protocol
