#pragma once

#include <QString>

namespace dlion::core {

class RunData;
struct StoredRun;

// Which of a run's model files: the TorchScript module (every run since
// built-in models came back as TorchScript too) or a built-in model's
// state_dict.
enum class ModelFile { TorchScript, StateDict };

// Writes the final model an agent sent (RunData::finalModel, and
// finalStateDict when there is one) into the run folder `dir` as
// finalModelFileName(format). Returns the TorchScript file's path; an
// empty string when the run has no model, or when a write failed (then
// *error says why).
QString keepFinalModel(const RunData &data, const QString &dir, QString *error);

// Copies file `which` of a recorded run's final model (kept in its run
// folder by dlion run) to `to`, after checking it against the SHA-256 the
// run recorded. Returns false with a message naming the run or file and
// what to do.
bool exportFinalModel(const StoredRun &run, ModelFile which, const QString &to, QString *error);

} // namespace dlion::core
