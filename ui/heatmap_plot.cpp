#include "heatmap_plot.h"

#include <QHelpEvent>
#include <QToolTip>

#include <cmath>

namespace dlion::ui {

HeatmapPlot::HeatmapPlot(const QString &title, const QString &scaleLabel, QWidget *parent) : QCustomPlot(parent)
{
    plotLayout()->insertRow(0);
    plotLayout()->addElement(0, 0, new QCPTextElement(this, title, QFont(font().family(), font().pointSize(), QFont::DemiBold)));
    m_map = new QCPColorMap(xAxis, yAxis);
    m_scale = new QCPColorScale(this);
    plotLayout()->addElement(1, 1, m_scale);
    m_scale->setType(QCPAxis::atRight);
    m_scale->axis()->setLabel(scaleLabel);
    m_map->setColorScale(m_scale);
    // Viridis: ordered, readable in dark and light themes, and its top end
    // is not white (the colour of the empty diagonal).
    QCPColorGradient gradient;
    gradient.setColorStops({{0.0, QColor(68, 1, 84)},
                            {0.25, QColor(59, 82, 139)},
                            {0.5, QColor(33, 145, 140)},
                            {0.75, QColor(94, 201, 98)},
                            {1.0, QColor(253, 231, 37)}});
    gradient.setNanHandling(QCPColorGradient::nhTransparent);
    m_map->setGradient(gradient);
    m_map->setInterpolate(false);
    auto *margins = new QCPMarginGroup(this);
    axisRect()->setMarginGroup(QCP::msBottom | QCP::msTop, margins);
    m_scale->setMarginGroup(QCP::msBottom | QCP::msTop, margins);
    xAxis->setLabel(tr("to worker"));
    yAxis->setLabel(tr("from worker"));
    yAxis->setRangeReversed(true);
    for (QCPAxis *axis : {xAxis, yAxis}) {
        axis->grid()->setVisible(false);
        axis->setSubTicks(false);
    }
    setMinimumSize(260, 200);
    setSize(1);
}

void HeatmapPlot::setSize(int workers)
{
    m_size = qMax(1, workers);
    m_map->data()->setSize(m_size, m_size);
    m_map->data()->setRange(QCPRange(0, m_size - 1), QCPRange(0, m_size - 1));
    for (int i = 0; i < m_size; ++i) {
        for (int j = 0; j < m_size; ++j)
            m_map->data()->setCell(j, i, std::nan(""));
    }
    QSharedPointer<QCPAxisTickerFixed> ticker(new QCPAxisTickerFixed);
    ticker->setTickStep(m_size <= 12 ? 1 : std::ceil(m_size / 8.0));
    ticker->setScaleStrategy(QCPAxisTickerFixed::ssNone);
    for (QCPAxis *axis : {xAxis, yAxis}) {
        axis->setTicker(ticker);
        axis->setRange(-0.5, m_size - 0.5);
    }
}

void HeatmapPlot::setDataRange(double lower, double upper)
{
    m_lower = lower;
    m_upper = upper;
    if (upper > lower)
        m_map->setDataRange(QCPRange(lower, upper));
}

bool HeatmapPlot::setValues(const std::function<double(int, int)> &value)
{
    bool changed = false;
    double top = 0;
    for (int i = 0; i < m_size; ++i) {
        for (int j = 0; j < m_size; ++j) {
            if (i == j)
                continue;
            const double v = value(i, j);
            top = qMax(top, v);
            if (m_map->data()->cell(j, i) != v) {
                m_map->data()->setCell(j, i, v);
                changed = true;
            }
        }
    }
    if (m_upper <= m_lower)
        m_map->setDataRange(QCPRange(0, top > 0 ? top : 1));
    return changed;
}

double HeatmapPlot::value(int from, int to) const
{
    return m_map->data()->cell(to, from);
}

bool HeatmapPlot::event(QEvent *e)
{
    if (e->type() == QEvent::ToolTip && m_cellText) {
        const auto *help = static_cast<QHelpEvent *>(e);
        const int to = int(std::lround(xAxis->pixelToCoord(help->pos().x())));
        const int from = int(std::lround(yAxis->pixelToCoord(help->pos().y())));
        if (axisRect()->rect().contains(help->pos()) && from >= 0 && to >= 0 && from < m_size && to < m_size && from != to)
            QToolTip::showText(help->globalPos(), m_cellText(from, to), this);
        else
            QToolTip::hideText();
        return true;
    }
    return QCustomPlot::event(e);
}

} // namespace dlion::ui
