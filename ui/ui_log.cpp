#include "ui_log.h"

namespace dlion::ui {

Q_LOGGING_CATEGORY(lcUi, "dlion.ui")

} // namespace dlion::ui
