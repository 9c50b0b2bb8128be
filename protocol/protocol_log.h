#pragma once
// The protocol library's logging category: dlion.link, the control
// connections (defined in framed_connection.cpp).
#include <QLoggingCategory>

namespace dlion::protocol {

Q_DECLARE_LOGGING_CATEGORY(lcLink)

} // namespace dlion::protocol
