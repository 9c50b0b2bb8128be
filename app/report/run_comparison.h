#pragma once

#include "report_series.h"

#include <run_store.h>

#include <QJsonObject>
#include <QList>
#include <QString>

#include <optional>

namespace dlion::report {

// The paper-style comparison of stored runs: time to target accuracy,
// accuracy at a wall-clock budget, bytes sent, throughput, and speedup over
// a baseline run. Pure data (QtCore): the GUI's compare view shows `rows`
// in a table and `curve` in an overlaid plot.
struct ComparisonRow {
    qint64 runId = 0;
    QString label;  // "#12 dlion"
    QString strategy;
    int workers = 0;
    QString status;
    double finalAccuracy = 0;
    std::optional<double> timeTo80, timeTo85, timeToTarget;
    double accuracyAtBudget = 0;  // the last evaluation at or before the budget
    qint64 bytesSent = 0;
    double samplesPerS = 0;
    double trainS = 0;
    // baseline time-to-target / this run's; nullopt if either never reached it.
    std::optional<double> speedup;
    bool isBaseline = false;
    Series curve;   // global test accuracy vs training time
};

struct Comparison {
    double target = 0.8;
    double budgetS = 0;
    qint64 baselineId = 0;
    QList<ComparisonRow> rows;

    // `baselineId` 0: the first run. `target` 0: the runs' own budget target
    // if they agree, else 0.80. `budgetS` 0: the shortest training time.
    static Comparison build(const QList<core::StoredRun> &runs, qint64 baselineId = 0, double target = 0,
                            double budgetS = 0);

    QString toText() const;       // an aligned table for a terminal
    QJsonObject toJson() const;
    QString toHtmlTable() const;  // the table alone (well-formed XML)
    // Whether the target is neither 80% nor 85% (then it gets its own column).
    bool hasExtraTarget() const;
    QString targetText() const;   // "80%", "92.5%"
};

// A self-contained HTML page: overlaid accuracy-vs-time curves and the table
// (needs a QApplication).
bool writeComparisonHtml(const Comparison &c, const QString &path, QString *error);

} // namespace dlion::report
