#pragma once

#include <QString>

class QWidget;

namespace dlion::ui {

// Marks an input as invalid in place: its background turns red-tinted (a
// blend with the current palette, so it reads in dark and light themes)
// and the message becomes its tooltip. Palette-based rather than a style
// sheet, which would change how spin boxes and combos are drawn.
class FieldMarker {
public:
    static void mark(QWidget *field, const QString &message);
    static void clear(QWidget *field);
    static bool isMarked(const QWidget *field);
};

} // namespace dlion::ui
