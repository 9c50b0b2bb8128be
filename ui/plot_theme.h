#pragma once

#include <QColor>
#include <QPalette>

class QCustomPlot;

namespace dlion::ui {

// Colours and fonts shared by every dashboard plot, derived from the
// widget palette so the plots follow the platform's dark or light theme.
class PlotTheme {
public:
    static bool isDark(const QPalette &palette);
    // A distinct colour per worker, stable for a given worker count.
    static QColor workerColor(int worker, int workers);
    static QColor accentColor(const QPalette &palette);
    static QColor mergeColor();
    static void apply(QCustomPlot *plot, const QPalette &palette);
};

} // namespace dlion::ui
