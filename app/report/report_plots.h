#pragma once

#include "report_series.h"

#include <QByteArray>
#include <QList>
#include <QString>

class QCustomPlot;
class QCPPainter;

namespace dlion::report {

// The report's plots, drawn with QCustomPlot (needs a QApplication; the
// offscreen platform will do). The same plot goes into HTML as PNG and into
// PDF as vector drawing.
enum class PlotKind { AccuracyVsTime, AccuracyVsStep, LossVsTime, LossVsStep, Shares, Bandwidth, Priority, Merges };

struct PlotInfo {
    PlotKind kind;
    const char *id;       // HTML anchor and file stem
    const char *title;
    const char *caption;
    const char *empty;    // what the report says when the run has no data for it
};
const QList<PlotInfo> &allPlots();

// Fills `plot`; false (and an empty plot) when the run has no data for it.
bool buildPlot(QCustomPlot *plot, PlotKind kind, const ReportSeries &s);
// Overlaid accuracy-vs-time curves of several runs (comparison).
void buildOverlay(QCustomPlot *plot, const QList<Series> &curves, const QString &yLabel);

// PNG bytes of a plot at `scale` x the given size (crisp on high-DPI screens).
QByteArray plotPng(QCustomPlot *plot, int width, int height, double scale = 2.0);
// Draws the plot as vectors at the painter's origin.
void plotToPainter(QCustomPlot *plot, QCPPainter *painter, int width, int height);

} // namespace dlion::report
