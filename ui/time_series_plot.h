#pragma once

#include <report_qcp.h>

#include <bounded_series.h>

#include <QList>

namespace dlion::ui {

// Lines over training time fed from BoundedSeries. `sync()` adds only the
// points appended since the last call and drops what the series dropped,
// so a refresh costs O(new points), not O(history).
class TimeSeriesPlot : public QCustomPlot {
    Q_OBJECT
public:
    TimeSeriesPlot(const QString &title, const QString &valueLabel, QWidget *parent = nullptr);

    // Fixed value range (e.g. 0-100 %); otherwise 0 to the largest value seen.
    void setFixedValueRange(double lower, double upper);
    void clearSeries();
    // Many thin curves are drawn without antialiasing: it dominates paint
    // time and adds nothing at one pixel wide.
    void addSeries(const core::BoundedSeries *series, const QString &name, const QPen &pen, bool inLegend,
                   bool antialiased = true);
    // Vertical markers (e.g. merge events) at the x of each point of `events`.
    void setEventSeries(const core::BoundedSeries *events, const QColor &color);
    // Returns true when anything changed.
    bool sync();
    qsizetype pointCount() const;
    // Points the bound series hold now (what a full redraw shows).
    qsizetype heldPointCount() const;
    int eventMarkerCount() const { return int(m_markers.size()); }

private:
    struct Binding {
        const core::BoundedSeries *series;
        QCPGraph *graph;
        qint64 seen = 0;
        qint64 first = 0;  // the series' firstIndex() at the last sync
    };
    bool syncBinding(Binding &b);
    void syncEvents();
    void updateRanges();

    QList<Binding> m_bindings;
    const core::BoundedSeries *m_events = nullptr;
    qint64 m_eventsSeen = 0;
    QColor m_eventColor;
    QList<QCPItemStraightLine *> m_markers;
    bool m_fixedRange = false;
    double m_maxValue = 0;
    bool m_follow = true;
};

} // namespace dlion::ui
