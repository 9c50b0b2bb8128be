#pragma once
// dlion_core's logging categories, each defined in the source it names.
#include <QLoggingCategory>

namespace dlion::core {

Q_DECLARE_LOGGING_CATEGORY(lcSession)  // dlion.session: agent connections (agent_connection.cpp)
Q_DECLARE_LOGGING_CATEGORY(lcSsh)      // dlion.ssh: SSH sessions (ssh_session.cpp)
Q_DECLARE_LOGGING_CATEGORY(lcStore)    // dlion.store: the run store (run_store.cpp)

} // namespace dlion::core
