#include "time_series_plot.h"

namespace dlion::ui {

namespace {
constexpr int kMaxMarkers = 64;
constexpr double kMinWindowS = 10;
} // namespace

TimeSeriesPlot::TimeSeriesPlot(const QString &title, const QString &valueLabel, QWidget *parent) : QCustomPlot(parent)
{
    plotLayout()->insertRow(0);
    auto *titleElement = new QCPTextElement(this, title, QFont(font().family(), font().pointSize(), QFont::DemiBold));
    plotLayout()->addElement(0, 0, titleElement);
    xAxis->setLabel(tr("training time (s)"));
    yAxis->setLabel(valueLabel);
    xAxis->setRange(0, kMinWindowS);
    yAxis->setRange(0, 1);
    legend->setVisible(false);
    legend->setFont(QFont(font().family(), qMax(7, font().pointSize() - 2)));
    legend->setIconSize(14, 8);
    axisRect()->insetLayout()->setInsetAlignment(0, Qt::AlignBottom | Qt::AlignRight);
    setNoAntialiasingOnDrag(true);
    setMinimumSize(260, 200);
    setToolTip(tr("%1 per worker over training time. Drag to pan, wheel to zoom, double-click to follow live.").arg(title));
    setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
    axisRect()->setRangeDrag(Qt::Horizontal);
    axisRect()->setRangeZoom(Qt::Horizontal);
    // Panning or zooming stops following the live edge; a double-click resumes.
    connect(this, &QCustomPlot::mouseWheel, this, [this] { m_follow = false; });
    connect(this, &QCustomPlot::mouseMove, this, [this](QMouseEvent *e) {
        if (e->buttons() != Qt::NoButton)
            m_follow = false;
    });
    connect(this, &QCustomPlot::mouseDoubleClick, this, [this] {
        m_follow = true;
        updateRanges();
        replot();
    });
}

void TimeSeriesPlot::setFixedValueRange(double lower, double upper)
{
    m_fixedRange = true;
    yAxis->setRange(lower, upper);
}

void TimeSeriesPlot::clearSeries()
{
    clearGraphs();
    for (QCPItemStraightLine *m : std::as_const(m_markers))
        removeItem(m);
    m_markers.clear();
    m_bindings.clear();
    m_events = nullptr;
    m_eventsSeen = 0;
    m_maxValue = 0;
    m_follow = true;
    legend->setVisible(false);
    setPlottingHint(QCP::phFastPolylines, false);
}

void TimeSeriesPlot::addSeries(const core::BoundedSeries *series, const QString &name, const QPen &pen, bool inLegend,
                               bool antialiased)
{
    QCPGraph *g = addGraph();
    g->setAntialiased(antialiased);
    g->setName(name);
    g->setPen(pen);
    g->setAdaptiveSampling(true);
    // Noisy per-round series in pens wider than 1 px took 50-110 ms a paint,
    // stroked as paths; fast polylines only coarsen the joins. With 1 px
    // pens they are slower than Qt's own polyline (bench_dashboard).
    if (pen.widthF() > 1)
        setPlottingHint(QCP::phFastPolylines, true);
    if (inLegend)
        legend->setVisible(true);
    else
        g->removeFromLegend();
    m_bindings.append({series, g, 0});
}

void TimeSeriesPlot::setEventSeries(const core::BoundedSeries *events, const QColor &color)
{
    m_events = events;
    m_eventsSeen = 0;
    m_eventColor = color;
}

bool TimeSeriesPlot::syncBinding(Binding &b)
{
    const core::BoundedSeries &s = *b.series;
    if (s.total() == b.seen)
        return false;
    const qint64 from = qMax(b.seen, s.firstIndex());
    QList<double> keys, values;
    keys.reserve(s.total() - from);
    values.reserve(s.total() - from);
    for (qint64 i = from; i < s.total(); ++i) {
        const auto local = qsizetype(i - s.firstIndex());
        keys.append(s.x(local));
        values.append(s.y(local));
        m_maxValue = qMax(m_maxValue, s.y(local));
    }
    // Keys need not be monotonic (evaluations of several workers share a
    // series), so let QCustomPlot sort them.
    b.graph->addData(keys, values, false);
    if (s.firstIndex() > b.first && !s.isEmpty()) {
        // The series dropped its oldest points: drop them from the graph too,
        // keeping everything at or after the oldest key still held.
        double oldest = s.x(0);
        for (qsizetype i = 1; i < s.size(); ++i)
            oldest = qMin(oldest, s.x(i));
        b.graph->data()->removeBefore(oldest);
    }
    b.first = s.firstIndex();
    b.seen = s.total();
    return true;
}

void TimeSeriesPlot::syncEvents()
{
    if (!m_events)
        return;
    const core::BoundedSeries &s = *m_events;
    for (qint64 i = qMax(m_eventsSeen, s.firstIndex()); i < s.total(); ++i) {
        auto *line = new QCPItemStraightLine(this);
        const double x = s.x(qsizetype(i - s.firstIndex()));
        line->point1->setCoords(x, 0);
        line->point2->setCoords(x, 1);
        line->setPen(QPen(m_eventColor, 1.5, Qt::DashLine));
        m_markers.append(line);
    }
    m_eventsSeen = s.total();
    while (m_markers.size() > kMaxMarkers)
        removeItem(m_markers.takeFirst());
}

bool TimeSeriesPlot::sync()
{
    bool changed = false;
    for (Binding &b : m_bindings)
        changed = syncBinding(b) || changed;
    const qint64 eventsBefore = m_eventsSeen;
    syncEvents();
    changed = changed || m_eventsSeen != eventsBefore;
    if (changed)
        updateRanges();
    return changed;
}

void TimeSeriesPlot::updateRanges()
{
    if (!m_follow)
        return;
    bool any = false;
    double lo = 0, hi = 0;
    for (const Binding &b : std::as_const(m_bindings)) {
        const core::BoundedSeries &s = *b.series;
        if (s.isEmpty())
            continue;
        lo = any ? qMin(lo, s.x(0)) : s.x(0);
        hi = any ? qMax(hi, s.x(s.size() - 1)) : s.x(s.size() - 1);
        any = true;
    }
    if (any)
        xAxis->setRange(lo, qMax(hi, lo + kMinWindowS));
    if (!m_fixedRange)
        yAxis->setRange(0, m_maxValue > 0 ? m_maxValue * 1.08 : 1);
}

qsizetype TimeSeriesPlot::heldPointCount() const
{
    qsizetype n = 0;
    for (const Binding &b : m_bindings)
        n += b.series->size();
    return n;
}

qsizetype TimeSeriesPlot::pointCount() const
{
    qsizetype n = 0;
    for (const Binding &b : m_bindings)
        n += b.graph->dataCount();
    return n;
}

} // namespace dlion::ui
