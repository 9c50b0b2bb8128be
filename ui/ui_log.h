#pragma once

#include <QLoggingCategory>

namespace dlion::ui {

Q_DECLARE_LOGGING_CATEGORY(lcUi)

} // namespace dlion::ui
