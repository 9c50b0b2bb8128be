#pragma once

#include <QLoggingCategory>

// The engine's log category ("dlion.engine"), defined in worker.cpp.
Q_DECLARE_LOGGING_CATEGORY(lcEngine)
