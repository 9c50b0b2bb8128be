#pragma once

#include <run_store.h>

#include <QString>

namespace dlion::report {

// The text of a report as HTML fragments (tables, headings) that both the
// HTML file and the PDF (through QTextDocument) use. Well-formed XML: every
// tag closed, text escaped, no named entities.
namespace content {

QString title(const core::StoredRun &run);
QString subtitle(const core::StoredRun &run);
QString summaryTable(const core::StoredRun &run);  // spec, cluster, versions, tags, notes
QString metricsTable(const core::StoredRun &run);  // final metrics
QString workersTable(const core::StoredRun &run);  // per worker
QString dataTable(const core::StoredRun &run);     // what each worker trained on
QString mergesTable(const core::StoredRun &run, int maxRows);

// Formatting shared with comparisons.
QString seconds(double s);
QString optionalSeconds(const std::optional<double> &s);
QString percent(double fraction);
QString megabytes(qint64 bytes);
QString rate(double samplesPerS);

} // namespace content
} // namespace dlion::report
