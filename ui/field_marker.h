#pragma once

#include <QString>

class QWidget;

namespace dlion::ui {

// Marks an input as invalid in place: a red frame (the application style
// sheet matches the "invalid" property) and the message as its tooltip.
class FieldMarker {
public:
    static void mark(QWidget *field, const QString &message);
    static void clear(QWidget *field);
    static bool isMarked(const QWidget *field);
    // The style sheet rule that draws the frame; installed once by the app.
    static QString styleSheet();
};

} // namespace dlion::ui
