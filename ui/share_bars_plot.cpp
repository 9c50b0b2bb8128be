#include "share_bars_plot.h"

#include "plot_theme.h"

#include <cmath>

namespace dlion::ui {

ShareBarsPlot::ShareBarsPlot(QWidget *parent) : QCustomPlot(parent)
{
    plotLayout()->insertRow(0);
    plotLayout()->addElement(0, 0, new QCPTextElement(this, tr("Batch share now"), QFont(font().family(), font().pointSize(), QFont::DemiBold)));
    m_bars = new QCPBars(xAxis, yAxis);
    m_bars->setWidth(0.7);
    xAxis->setLabel(tr("worker"));
    yAxis->setLabel(tr("share of global batch (%)"));
    xAxis->grid()->setVisible(false);
    xAxis->setSubTicks(false);
    yAxis->setRange(0, 100);
    setMinimumSize(220, 200);
    setToolTip(tr("Weighted dynamic batching: each worker's share of the samples in the current round"));
    setWorkers(1);
}

void ShareBarsPlot::setWorkers(int workers)
{
    m_workers = qMax(1, workers);
    m_bars->data()->clear();
    QSharedPointer<QCPAxisTickerFixed> ticker(new QCPAxisTickerFixed);
    ticker->setTickStep(m_workers <= 12 ? 1 : std::ceil(m_workers / 8.0));
    ticker->setScaleStrategy(QCPAxisTickerFixed::ssNone);
    xAxis->setTicker(ticker);
    xAxis->setRange(-0.6, m_workers - 0.4);
    QColor fill = PlotTheme::workerColor(0, 1);
    m_bars->setPen(QPen(fill.darker(130)));
    m_bars->setAntialiased(false);  // axis-aligned rectangles gain nothing from it
    fill.setAlpha(190);
    m_bars->setBrush(fill);
}

bool ShareBarsPlot::setShares(const std::function<double(int)> &sharePercent)
{
    QList<double> keys, values;
    bool changed = m_bars->data()->size() != m_workers;
    double top = 0;
    for (int w = 0; w < m_workers; ++w) {
        keys.append(w);
        values.append(sharePercent(w));
        top = qMax(top, values.last());
        changed = changed || share(w) != values.last();
    }
    if (changed) {
        m_bars->setData(keys, values, true);
        // In 10 % steps, so the axis (and its cached labels) rarely changes.
        const double upper = std::ceil(qMax(top * 1.2, 200.0 / m_workers) / 10.0) * 10.0;
        yAxis->setRange(0, qMin(100.0, upper));
    }
    return changed;
}

double ShareBarsPlot::share(int worker) const
{
    auto it = m_bars->data()->findBegin(worker, false);
    return it != m_bars->data()->constEnd() && it->key == worker ? it->value : -1;
}

} // namespace dlion::ui
