#pragma once

#include <QString>

namespace dlion::core {

// Where a dlion-agent listens for its controller.
struct AgentEndpoint {
    QString host;
    quint16 port = 0;
    // The job's model file on the agent's host when the deployer uploaded
    // it there; empty: the job's own path.
    QString model{};  // a default initializer: {host, port} stays warning-free
};

} // namespace dlion::core
