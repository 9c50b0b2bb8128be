#include "plot_theme.h"

#include <report_qcp.h>

namespace dlion::ui {

bool PlotTheme::isDark(const QPalette &palette)
{
    return palette.color(QPalette::Window).lightness() < 128;
}

QColor PlotTheme::workerColor(int worker, int workers)
{
    // Golden-angle hue steps keep neighbouring workers apart for any count.
    const int hue = int(std::fmod(worker * 137.508 + 210.0, 360.0));
    const int sat = workers > 12 ? 150 + 60 * (worker % 2) : 185;
    return QColor::fromHsv(hue, sat, 215);
}

QColor PlotTheme::accentColor(const QPalette &palette)
{
    return isDark(palette) ? QColor(240, 240, 240) : QColor(25, 25, 30);
}

QColor PlotTheme::mergeColor()
{
    return QColor(123, 92, 214);
}

void PlotTheme::apply(QCustomPlot *plot, const QPalette &palette)
{
    const QColor base = palette.color(QPalette::Base);
    const QColor text = palette.color(QPalette::Text);
    QColor grid = text;
    grid.setAlpha(35);
    QColor subGrid = text;
    subGrid.setAlpha(15);
    plot->setBackground(base);
    QList<QCPAxis *> axes;
    for (QCPAxisRect *rect : plot->axisRects())
        axes += rect->axes();
    for (int i = 0; i < plot->plotLayout()->elementCount(); ++i) {
        if (auto *scale = qobject_cast<QCPColorScale *>(plot->plotLayout()->elementAt(i)))
            axes.append(scale->axis());
    }
    for (QCPAxis *axis : std::as_const(axes)) {
        axis->setBasePen(QPen(text, 1));
        axis->setTickPen(QPen(text, 1));
        axis->setSubTickPen(QPen(text, 1));
        axis->setLabelColor(text);
        axis->setTickLabelColor(text);
        axis->grid()->setPen(QPen(grid, 1, Qt::DotLine));
        axis->grid()->setSubGridPen(QPen(subGrid, 1, Qt::DotLine));
        axis->grid()->setZeroLinePen(Qt::NoPen);
    }
    if (plot->legend) {
        QColor legendBg = base;
        legendBg.setAlpha(210);
        plot->legend->setBrush(legendBg);
        plot->legend->setBorderPen(QPen(grid));
        plot->legend->setTextColor(text);
    }
    for (int i = 0; i < plot->plotLayout()->elementCount(); ++i) {
        if (auto *title = qobject_cast<QCPTextElement *>(plot->plotLayout()->elementAt(i)))
            title->setTextColor(text);
    }
}

} // namespace dlion::ui
