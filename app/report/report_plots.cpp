#include "report_plots.h"

#include "report_qcp.h"

#include <QBuffer>

#include <cmath>

namespace dlion::report {

namespace {

QColor workerColor(int w)
{
    static const QColor palette[] = {QColor(31, 119, 180), QColor(255, 127, 14), QColor(44, 160, 44),
                                     QColor(214, 39, 40),  QColor(148, 103, 189), QColor(140, 86, 75),
                                     QColor(227, 119, 194), QColor(127, 127, 127), QColor(188, 189, 34),
                                     QColor(23, 190, 207)};
    return palette[w % 10];
}

void style(QCustomPlot *plot, const QString &xLabel, const QString &yLabel)
{
    QFont font(QStringLiteral("DejaVu Sans"), 8);
    plot->setFont(font);
    for (QCPAxis *axis : {plot->xAxis, plot->yAxis}) {
        axis->setLabelFont(font);
        axis->setTickLabelFont(font);
        axis->grid()->setPen(QPen(QColor(225, 225, 225), 0, Qt::SolidLine));
    }
    plot->xAxis->setLabel(xLabel);
    plot->yAxis->setLabel(yLabel);
    plot->legend->setFont(font);
    plot->legend->setBrush(QColor(255, 255, 255, 220));
    plot->legend->setBorderPen(QPen(QColor(200, 200, 200)));
}

// The legend in a row under the axes, entries side by side, so it never
// hides a curve.
void legendBelow(QCustomPlot *plot)
{
    auto *row = new QCPLayoutGrid;
    plot->plotLayout()->addElement(1, 0, row);
    row->setMargins(QMargins(5, 0, 5, 5));
    row->addElement(0, 0, plot->legend);
    plot->legend->setFillOrder(QCPLayoutGrid::foColumnsFirst);
    plot->legend->setWrap(5);
    plot->legend->setBorderPen(Qt::NoPen);
    plot->legend->setVisible(true);
    plot->plotLayout()->setRowStretchFactor(1, 0.001);
}

QCPGraph *addLine(QCustomPlot *plot, const Series &s, const QColor &color, double width = 1.5, bool dots = false)
{
    QCPGraph *g = plot->addGraph();
    g->setName(s.name);
    g->setData(s.x, s.y, true);
    g->setPen(QPen(color, width));
    if (dots)
        g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, color, Qt::white, 4));
    return g;
}

bool heatmap(QCustomPlot *plot, const Heatmap &h, const QString &unit, bool unitRange)
{
    if (h.isEmpty())
        return false;
    style(plot, QStringLiteral("training time (s)"), QStringLiteral("link (sender→receiver)"));
    auto *map = new QCPColorMap(plot->xAxis, plot->yAxis);
    map->data()->setSize(h.cols, int(h.rows.size()));
    const double dx = (h.t1 - h.t0) / h.cols;
    map->data()->setRange(QCPRange(h.t0 + dx / 2, h.t1 - dx / 2), QCPRange(0, double(h.rows.size() - 1)));
    for (int r = 0; r < h.rows.size(); ++r) {
        for (int c = 0; c < h.cols; ++c)
            map->data()->setCell(c, r, h.at(r, c));
    }
    QCPColorGradient gradient(unitRange ? QCPColorGradient::gpHot : QCPColorGradient::gpThermal);
    gradient.setNanHandling(QCPColorGradient::nhTransparent);
    if (unitRange)
        gradient = gradient.inverted();
    map->setGradient(gradient);
    map->setInterpolate(false);
    map->setDataRange(unitRange ? QCPRange(0, 1) : QCPRange(h.min, std::max(h.max, h.min + 1e-9)));
    auto *scale = new QCPColorScale(plot);
    plot->plotLayout()->addElement(0, 1, scale);
    scale->setType(QCPAxis::atRight);
    scale->setGradient(gradient);
    scale->setDataRange(map->dataRange());
    scale->axis()->setLabel(unit);
    scale->axis()->setLabelFont(plot->font());
    scale->axis()->setTickLabelFont(plot->font());
    map->setColorScale(scale);
    auto *margins = new QCPMarginGroup(plot);
    plot->axisRect()->setMarginGroup(QCP::msBottom | QCP::msTop, margins);
    scale->setMarginGroup(QCP::msBottom | QCP::msTop, margins);
    QSharedPointer<QCPAxisTickerText> ticker(new QCPAxisTickerText);
    const int step = std::max(1, int(std::ceil(h.rows.size() / 16.0)));
    for (int r = 0; r < h.rows.size(); r += step)
        ticker->addTick(r, h.rows[r]);
    plot->yAxis->setTicker(ticker);
    plot->yAxis->setRangeReversed(true);
    plot->xAxis->grid()->setVisible(false);
    plot->yAxis->grid()->setVisible(false);
    plot->xAxis->setRange(h.t0, h.t1);
    plot->yAxis->setRange(-0.5, h.rows.size() - 0.5);
    return true;
}

} // namespace

const QList<PlotInfo> &allPlots()
{
    static const QList<PlotInfo> plots = {
        {PlotKind::AccuracyVsTime, "accuracy-time", "Accuracy vs time",
         "Test accuracy of the model over all test shards (bold) and of each worker's replica on its own shard.",
         "No evaluations were recorded in this run."},
        {PlotKind::AccuracyVsStep, "accuracy-step", "Accuracy vs step", "Test accuracy against rank 0's round.", "No evaluations were recorded in this run."},
        {PlotKind::LossVsTime, "loss-time", "Loss vs time",
         "Mean training loss of all workers (binned) and the test loss at each evaluation.",
         "No rounds were recorded in this run."},
        {PlotKind::LossVsStep, "loss-step", "Loss vs step", "Mean training loss per round bin.", "No rounds were recorded in this run."},
        {PlotKind::Shares, "shares", "Compute shares over time",
         "Each worker's share of the global batch (weighted dynamic batching follows measured speed).",
         "No rounds were recorded in this run."},
        {PlotKind::Bandwidth, "bandwidth", "Link bandwidth",
         "Estimated bandwidth of each directed link over time, Mbit/s.",
         "No per-link bandwidth was reported in this run (its strategy does not measure links)."},
        {PlotKind::Priority, "priority", "Gradient priority",
         "Fraction of the gradient each link carried per round (1 = dense); the rest waits in the residual.",
         "No per-link gradient fractions were reported in this run."},
        {PlotKind::Merges, "merges", "Merge timeline",
         "Direct knowledge transfer: each point is a merge into the receiving worker, coloured by the best worker it took from.",
         nullptr},
    };
    return plots;
}

bool buildPlot(QCustomPlot *plot, PlotKind kind, const ReportSeries &s)
{
    plot->clearPlottables();
    plot->legend->setVisible(false);
    const int workers = int(s.shares.size());
    switch (kind) {
    case PlotKind::AccuracyVsTime:
    case PlotKind::AccuracyVsStep: {
        const bool time = kind == PlotKind::AccuracyVsTime;
        const Series &main = time ? s.accuracyVsTime : s.accuracyVsStep;
        if (main.x.isEmpty())
            return false;
        style(plot, time ? QStringLiteral("training time (s)") : QStringLiteral("round"), QStringLiteral("test accuracy"));
        if (time) {
            for (int w = 0; w < s.workerAccuracy.size(); ++w) {
                if (!s.workerAccuracy[w].x.isEmpty())
                    addLine(plot, s.workerAccuracy[w], workerColor(w).lighter(130), 1.0);
            }
        }
        addLine(plot, main, Qt::black, 2.0, main.x.size() < 60);
        plot->rescaleAxes();
        plot->yAxis->setRange(0, 1.02);
        plot->xAxis->setRange(0, plot->xAxis->range().upper * 1.02);
        if (time && workers <= 10)
            legendBelow(plot);
        return true;
    }
    case PlotKind::LossVsTime:
    case PlotKind::LossVsStep: {
        const bool time = kind == PlotKind::LossVsTime;
        const Series &train = time ? s.trainLossVsTime : s.trainLossVsStep;
        if (train.x.isEmpty())
            return false;
        style(plot, time ? QStringLiteral("training time (s)") : QStringLiteral("round"), QStringLiteral("loss"));
        addLine(plot, train, workerColor(0));
        if (time && !s.evalLossVsTime.x.isEmpty())
            addLine(plot, s.evalLossVsTime, workerColor(3), 1.5, true);
        plot->rescaleAxes();
        plot->yAxis->setRange(0, plot->yAxis->range().upper * 1.05);
        plot->xAxis->setRange(0, plot->xAxis->range().upper * 1.02);
        if (time)
            legendBelow(plot);
        return true;
    }
    case PlotKind::Shares: {
        if (workers == 0 || s.shares[0].x.isEmpty())
            return false;
        style(plot, QStringLiteral("training time (s)"), QStringLiteral("share of the global batch"));
        for (int w = 0; w < workers; ++w)
            addLine(plot, s.shares[w], workerColor(w));
        plot->rescaleAxes();
        plot->yAxis->setRange(0, std::min(1.0, plot->yAxis->range().upper * 1.15 + 0.01));
        plot->xAxis->setRange(0, plot->xAxis->range().upper * 1.02);
        legendBelow(plot);
        return true;
    }
    case PlotKind::Bandwidth:
        return heatmap(plot, s.bandwidth, QStringLiteral("Mbit/s"), false);
    case PlotKind::Priority:
        return heatmap(plot, s.priority, QStringLiteral("fraction sent"), true);
    case PlotKind::Merges: {
        if (s.merges.isEmpty())
            return false;
        style(plot, QStringLiteral("training time (s)"), QStringLiteral("receiving worker"));
        QMap<int, QCPGraph *> byFrom;
        for (const auto &m : s.merges) {
            QCPGraph *&g = byFrom[m.from];
            if (!g) {
                g = plot->addGraph();
                g->setName(QStringLiteral("from worker %1").arg(m.from));
                g->setLineStyle(QCPGraph::lsNone);
                g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDiamond, workerColor(m.from), workerColor(m.from), 7));
            }
            g->addData(m.t, m.to);
        }
        QSharedPointer<QCPAxisTickerText> ticker(new QCPAxisTickerText);
        for (int w = 0; w < std::max(1, workers); ++w)
            ticker->addTick(w, QStringLiteral("worker %1").arg(w));
        plot->yAxis->setTicker(ticker);
        plot->yAxis->setRange(-0.5, std::max(1, workers) - 0.5);
        plot->xAxis->setRange(0, s.trainS * 1.02);
        legendBelow(plot);
        return true;
    }
    }
    return false;
}

void buildOverlay(QCustomPlot *plot, const QList<Series> &curves, const QString &yLabel)
{
    plot->clearPlottables();
    style(plot, QStringLiteral("training time (s)"), yLabel);
    for (int i = 0; i < curves.size(); ++i)
        addLine(plot, curves[i], workerColor(i), 1.8);
    plot->rescaleAxes();
    plot->yAxis->setRange(0, 1.02);
    plot->xAxis->setRange(0, plot->xAxis->range().upper * 1.02);
    legendBelow(plot);
}

QByteArray plotPng(QCustomPlot *plot, int width, int height, double scale)
{
    const QPixmap pixmap = plot->toPixmap(width, height, scale);
    QByteArray bytes;
    QBuffer buffer(&bytes);
    buffer.open(QIODevice::WriteOnly);
    pixmap.save(&buffer, "PNG");
    return bytes;
}

void plotToPainter(QCustomPlot *plot, QCPPainter *painter, int width, int height)
{
    plot->toPainter(painter, width, height);
}

} // namespace dlion::report
