#pragma once
// The agent's logging category, dlion.agent (defined in agent_server.cpp).
#include <QLoggingCategory>

Q_DECLARE_LOGGING_CATEGORY(lcAgent)
