#pragma once

#include <run_data.h>

#include <QList>
#include <QString>
#include <QStringList>
#include <QVector>

namespace dlion::report {

struct Series {
    QString name;
    QVector<double> x, y;
};

// Rows × time bins of a per-link quantity; NaN where no record fell in a bin.
struct Heatmap {
    QStringList rows;       // "0→1", "0→2", …
    int cols = 0;
    double t0 = 0, t1 = 0;  // time span of the bins (seconds of training)
    QVector<double> values; // row-major, rows.size() * cols
    double min = 0, max = 0;
    bool isEmpty() const { return rows.isEmpty() || cols == 0; }
    double at(int row, int col) const { return values[row * cols + col]; }
};

// Everything a report plots, derived from a run's records (QtCore only, so
// a view or a test can use it without widgets).
struct ReportSeries {
    Series accuracyVsTime;      // global test accuracy (all shards), rank 0's evaluations
    Series accuracyVsStep;      // the same against rank 0's round
    QList<Series> workerAccuracy;  // each replica on its shard, vs time
    Series evalLossVsTime;      // global test loss
    Series trainLossVsTime;     // mean training loss of all workers, binned
    Series trainLossVsStep;     // mean training loss per round bin
    QList<Series> shares;       // per worker: share of the global batch, binned over time
    QList<Series> rates;        // per worker: samples/s, binned over time
    Heatmap bandwidth;          // Mbit/s per directed link
    Heatmap priority;           // fraction of the gradient sent per link
    QList<protocol::MergeEvent> merges;
    double trainS = 0;

    // `bins` 0: about one time bin per second of training, 10 to 80.
    static ReportSeries from(const core::RunData &data, int bins = 0);
};

} // namespace dlion::report
