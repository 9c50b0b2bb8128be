#pragma once

#include <telemetry_model.h>

#include <QElapsedTimer>
#include <QList>
#include <QTimer>
#include <QWidget>

class QCustomPlot;

namespace dlion::core {
class RunData;
}

namespace dlion::ui {

class HeatmapPlot;
class ShareBarsPlot;
class TimeSeriesPlot;

// The live training view: compute shares and rates, link bandwidth and
// gradient priorities, accuracy and loss with merge events.
//
// Telemetry is decoupled from painting (the PlotJuggler pattern): frames
// only land in the bounded TelemetryModel; a timer at a fixed rate pulls
// what is new and replots only the plots whose data changed.
class Dashboard : public QWidget {
    Q_OBJECT
public:
    explicit Dashboard(QWidget *parent = nullptr);

    // Starts a new run view. `caps` is the configured link cap matrix in
    // Mbit/s (empty, or 0 for an uncapped link).
    void reset(int workers, const QList<QList<double>> &caps);
    // Pulls telemetry from `data` on each refresh (nullptr: feed model() directly).
    void attach(const core::RunData *data) { m_data = data; }
    void setLinkCap(int from, int to, double mbps);
    core::TelemetryModel &model() { return m_model; }
    const core::TelemetryModel &model() const { return m_model; }

    // Plots refresh at `hz` (0: only when refresh() is called).
    void setRefreshRate(int hz);
    // Pulls new telemetry and replots what changed, as many plots as fit in
    // a frame (the rest on the next refreshes, longest waiting first);
    // returns the number of plots replotted. The refresh timer calls it.
    int refresh();
    // What a refresh may spend painting, judged by each plot's last paint
    // time; it paints at least one plot (0: exactly one).
    void setFrameBudget(double ms) { m_frameBudgetMs = ms; }

    qsizetype pointCount() const;
    qsizetype heldPointCount() const;
    int mergeMarkerCount() const;
    QList<QCustomPlot *> plots() const;
    QList<TimeSeriesPlot *> timeSeriesPlots() const;
    const HeatmapPlot *bandwidthMap() const { return m_bandwidth; }

protected:
    void changeEvent(QEvent *e) override;

private:
    void rebuild();
    void syncPlots();  // new telemetry into the plots; the changed ones wait to be painted
    void applyTheme();
    double capFor(int from, int to) const;
    QString linkText(int from, int to) const;

    core::TelemetryModel m_model;
    const core::RunData *m_data = nullptr;
    QList<QList<double>> m_caps;
    quint64 m_epoch = 0;
    quint64 m_revision = 0;
    QList<QCustomPlot *> m_unpainted;
    // Eight plots replotted at once took 20-35 ms a refresh on a 2-core
    // machine (bench_dashboard), longer than a frame.
    double m_frameBudgetMs = 14;
    QTimer m_timer;
    int m_hz = 30;

    ShareBarsPlot *m_share;
    TimeSeriesPlot *m_shareHistory;
    TimeSeriesPlot *m_rate;
    TimeSeriesPlot *m_accuracy;
    TimeSeriesPlot *m_loss;
    TimeSeriesPlot *m_sent;
    HeatmapPlot *m_bandwidth;
    HeatmapPlot *m_fraction;
};

} // namespace dlion::ui
