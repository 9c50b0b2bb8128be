#pragma once

#include <run_store.h>

#include <QString>
#include <QStringList>

#include <optional>

namespace dlion::report {

// Report formats of `dlion report` and the GUI's File → Export.
//
//   html  one self-contained file: run summary, final metrics, plots as
//         inline PNG (accuracy and loss vs time and vs step, compute shares,
//         link-bandwidth and gradient-priority heatmaps, merge timeline).
//   pdf   the same content, paged (A4), plots drawn as vectors.
//   csv   a folder of tidy CSV files for pandas/R: rounds.csv (one row per
//         worker per round), links.csv (one row per worker, round and peer:
//         mbps, fraction), evals.csv, merges.csv, summary.csv (key,value).
//   json  summary.json of the run (with every series) plus "run": metadata.
//
// html and pdf need a QApplication (QCustomPlot); csv and json do not.
enum class Format { Html, Pdf, Csv, Json };

std::optional<Format> parseFormat(const QString &name);
QString formatName(Format f);
// "run-12.html", "run-12-csv", …
QString defaultOutputName(qint64 runId, Format f);

struct Result {
    bool ok = false;
    QString error;       // one line naming the path and the reason
    QStringList files;   // what was written
    int pages = 0;       // pdf only
};

// Writes atomically: a failed write leaves no partial file behind. `path`
// "-" writes json (or csv's rounds.csv) to standard output.
Result writeReport(const core::StoredRun &run, Format format, const QString &path);

// The individual writers (the facade above dispatches to them).
Result writeHtml(const core::StoredRun &run, const QString &path);
Result writePdf(const core::StoredRun &run, const QString &path);
Result writeCsv(const core::StoredRun &run, const QString &dir);
Result writeJson(const core::StoredRun &run, const QString &path);

} // namespace dlion::report
