#pragma once

#include <QString>

namespace dlion::core {

// Where a dlion-agent listens for its controller.
struct AgentEndpoint {
    QString host;
    quint16 port = 0;
};

} // namespace dlion::core
