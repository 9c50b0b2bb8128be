#include "dashboard.h"

#include "heatmap_plot.h"
#include "plot_theme.h"
#include "share_bars_plot.h"
#include "time_series_plot.h"

#include <run_data.h>

#include <QElapsedTimer>
#include <QEvent>
#include <QGridLayout>

namespace dlion::ui {

using Metric = core::TelemetryModel::Metric;

namespace {
// Beyond this many workers a legend hides the curves it describes.
constexpr int kMaxLegendWorkers = 8;
} // namespace

Dashboard::Dashboard(QWidget *parent)
    : QWidget(parent), m_share(new ShareBarsPlot(this)),
      m_shareHistory(new TimeSeriesPlot(tr("Batch share over time"), tr("share of global batch (%)"), this)),
      m_rate(new TimeSeriesPlot(tr("Compute rate"), tr("samples/s"), this)),
      m_accuracy(new TimeSeriesPlot(tr("Test accuracy"), tr("accuracy (%)"), this)),
      m_loss(new TimeSeriesPlot(tr("Training loss"), tr("cross-entropy loss"), this)),
      m_sent(new TimeSeriesPlot(tr("Gradient sent (mean over links)"), tr("fraction sent (%)"), this)),
      m_bandwidth(new HeatmapPlot(tr("Estimated link bandwidth"), tr("Mbit/s"), this)),
      m_fraction(new HeatmapPlot(tr("Gradient sent per link"), tr("% of gradient"), this))
{
    m_accuracy->setFixedValueRange(0, 103);  // headroom: a curve at 100 % stays visible
    m_sent->setFixedValueRange(0, 105);
    m_shareHistory->setFixedValueRange(0, 105);
    m_fraction->setDataRange(0, 100);
    m_accuracy->setToolTip(tr("Each worker's replica on the shared test subset, the best worker and the mean replica. "
                              "Dashed lines mark merges (direct knowledge transfer)."));
    m_loss->setToolTip(tr("Training loss per worker; dashed lines mark merges."));
    m_rate->setToolTip(tr("Measured compute rate per worker, including its emulated slowdown"));
    m_shareHistory->setToolTip(tr("Each worker's share of the global batch: weighted dynamic batching follows its speed"));
    m_sent->setToolTip(tr("Mean fraction of the gradient each worker sends to its peers per round"));
    m_bandwidth->setCellText([this](int from, int to) { return linkText(from, to); });
    m_fraction->setCellText([this](int from, int to) { return linkText(from, to); });

    auto *grid = new QGridLayout(this);
    grid->setContentsMargins(0, 0, 0, 0);
    grid->setSpacing(6);
    grid->addWidget(m_share, 0, 0);
    grid->addWidget(m_shareHistory, 0, 1);
    grid->addWidget(m_rate, 0, 2);
    grid->addWidget(m_accuracy, 0, 3);
    grid->addWidget(m_bandwidth, 1, 0);
    grid->addWidget(m_fraction, 1, 1);
    grid->addWidget(m_sent, 1, 2);
    grid->addWidget(m_loss, 1, 3);
    for (int c = 0; c < 4; ++c)
        grid->setColumnStretch(c, 1);

    applyTheme();
    connect(&m_timer, &QTimer::timeout, this, &Dashboard::refresh);
    m_timer.setTimerType(Qt::PreciseTimer);
    setRefreshRate(m_hz);
    reset(0, {});
}

void Dashboard::setRefreshRate(int hz)
{
    m_hz = qBound(0, hz, 120);
    if (m_hz == 0)
        m_timer.stop();
    else
        m_timer.start(1000 / m_hz);
}

void Dashboard::reset(int workers, const QList<QList<double>> &caps)
{
    m_caps = caps;
    m_model.reset(workers);
    rebuild();
}

void Dashboard::setLinkCap(int from, int to, double mbps)
{
    const int n = m_model.workers();
    if (from < 0 || to < 0 || from >= n || to >= n)
        return;
    if (m_caps.size() != n)
        m_caps = QList<QList<double>>(n, QList<double>(n, 0));
    m_caps[from][to] = mbps;
}

double Dashboard::capFor(int from, int to) const
{
    return from < m_caps.size() && to < m_caps[from].size() ? m_caps[from][to] : 0;
}

QString Dashboard::linkText(int from, int to) const
{
    const double cap = capFor(from, to);
    const QString capText = cap > 0 ? tr("%1 Mbit/s").arg(cap, 0, 'f', 0) : tr("uncapped");
    return tr("<b>worker %1 → worker %2</b><br>estimated: %3 Mbit/s<br>configured cap: %4<br>gradient sent: %5 %")
        .arg(from)
        .arg(to)
        .arg(m_model.linkMbps(from, to), 0, 'f', 1)
        .arg(capText)
        .arg(100.0 * m_model.linkFraction(from, to), 0, 'f', 1);
}

void Dashboard::rebuild()
{
    m_epoch = m_model.epoch();
    m_revision = 0;
    m_unpainted.clear();  // every plot is replotted below
    const int n = m_model.workers();
    const bool legend = n <= kMaxLegendWorkers;
    m_share->setWorkers(n);
    m_bandwidth->setSize(n);
    m_fraction->setSize(n);
    for (TimeSeriesPlot *p : timeSeriesPlots())
        p->clearSeries();
    for (int w = 0; w < n; ++w) {
        // Beyond the legend's size lines are told apart by colour only, and
        // a 1 px pen is drawn as lines, not stroked as a path: 85 ms to 5 ms
        // per paint of 16 noisy rate series (bench_dashboard). Per-round
        // series are dense and noisy, drawn without antialiasing (loss at 8
        // workers: 9.1 to 5.6 ms a paint); sparse evaluations keep it.
        const QPen pen(PlotTheme::workerColor(w, n), n > kMaxLegendWorkers ? 1.0 : 1.6);
        const QString name = tr("worker %1").arg(w);
        m_shareHistory->addSeries(&m_model.series(Metric::Share, w), name, pen, legend, false);
        m_rate->addSeries(&m_model.series(Metric::Rate, w), name, pen, legend, false);
        m_loss->addSeries(&m_model.series(Metric::Loss, w), name, pen, legend, false);
        m_sent->addSeries(&m_model.series(Metric::FractionSent, w), name, pen, legend, false);
        m_accuracy->addSeries(&m_model.series(Metric::Accuracy, w), name, pen, legend, legend);
    }
    const QColor accent = PlotTheme::accentColor(palette());
    m_accuracy->addSeries(&m_model.bestAccuracy(), tr("best worker"), QPen(accent, 2.6), true);
    m_accuracy->addSeries(&m_model.globalAccuracy(), tr("mean replica"), QPen(accent, 1.6, Qt::DotLine), true);
    m_accuracy->setEventSeries(&m_model.merges(), PlotTheme::mergeColor());
    m_loss->setEventSeries(&m_model.merges(), PlotTheme::mergeColor());
    for (QCustomPlot *p : plots())
        p->replot();
}

int Dashboard::refresh()
{
    if (m_data)
        m_model.catchUp(*m_data);
    if (m_model.epoch() != m_epoch)
        rebuild();
    if (m_model.revision() != m_revision)
        syncPlots();
    // Plots left over wait at the front, so each gets its turn.
    QElapsedTimer clock;
    clock.start();
    int replotted = 0;
    for (auto it = m_unpainted.begin(); it != m_unpainted.end();) {
        QCustomPlot *p = *it;
        // A hidden plot keeps its place: QCustomPlot does not replot when
        // shown, so it would show stale curves (a page switched back to).
        if (!p->isVisible()) {
            ++it;
            continue;
        }
        if (replotted > 0 && double(clock.nsecsElapsed()) / 1e6 + p->replotTime() > m_frameBudgetMs)
            break;
        it = m_unpainted.erase(it);
        p->replot(QCustomPlot::rpImmediateRefresh);
        ++replotted;
    }
    return replotted;
}

void Dashboard::syncPlots()
{
    m_revision = m_model.revision();
    QList<QCustomPlot *> dirty;
    auto share = [this](int w) {
        const auto *r = m_model.lastRound(w);
        return r ? 100.0 * r->share : 0.0;
    };
    if (m_share->setShares(share))
        dirty.append(m_share);
    if (m_bandwidth->setValues([this](int i, int j) { return m_model.linkMbps(i, j); }))
        dirty.append(m_bandwidth);
    if (m_fraction->setValues([this](int i, int j) { return 100.0 * m_model.linkFraction(i, j); }))
        dirty.append(m_fraction);
    for (TimeSeriesPlot *p : timeSeriesPlots()) {
        if (p->sync())
            dirty.append(p);
    }
    for (QCustomPlot *p : std::as_const(dirty)) {
        if (!m_unpainted.contains(p))
            m_unpainted.append(p);
    }
}

qsizetype Dashboard::pointCount() const
{
    qsizetype n = 0;
    for (const TimeSeriesPlot *p : timeSeriesPlots())
        n += p->pointCount();
    return n;
}

qsizetype Dashboard::heldPointCount() const
{
    qsizetype n = 0;
    for (const TimeSeriesPlot *p : timeSeriesPlots())
        n += p->heldPointCount();
    return n;
}

int Dashboard::mergeMarkerCount() const
{
    return m_accuracy->eventMarkerCount();
}

QList<QCustomPlot *> Dashboard::plots() const
{
    return {m_share, m_shareHistory, m_rate, m_accuracy, m_bandwidth, m_fraction, m_sent, m_loss};
}

QList<TimeSeriesPlot *> Dashboard::timeSeriesPlots() const
{
    return {m_shareHistory, m_rate, m_accuracy, m_loss, m_sent};
}

void Dashboard::applyTheme()
{
    for (QCustomPlot *p : plots())
        PlotTheme::apply(p, palette());
}

void Dashboard::changeEvent(QEvent *e)
{
    QWidget::changeEvent(e);
    if (e->type() == QEvent::PaletteChange || e->type() == QEvent::StyleChange) {
        applyTheme();
        rebuild();  // pens follow the new palette; data is re-added on the next refresh
    }
}

} // namespace dlion::ui
