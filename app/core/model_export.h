#pragma once

#include <QString>

namespace dlion::core {

class RunData;
struct StoredRun;

// Writes the final model an agent sent (RunData::finalModel) into the run
// folder `dir` as finalModelFileName(its format). Returns the file's path;
// an empty string when the run has no model, or when the write failed
// (then *error says why).
QString keepFinalModel(const RunData &data, const QString &dir, QString *error);

// Copies a recorded run's final model (kept in its run folder by dlion run)
// to `to`, after checking it against the SHA-256 the run recorded. Returns
// false with a message naming the run or file and what to do.
bool exportFinalModel(const StoredRun &run, const QString &to, QString *error);

} // namespace dlion::core
