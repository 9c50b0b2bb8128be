#pragma once

#include <command_line.h>
#include <run_store.h>

#include <QCommandLineParser>
#include <QString>
#include <QTextStream>

namespace dlion::cli {

// Shared by the commands that read or edit the run store.
QTextStream &stdOut();
QTextStream &stdErr();

// Adds --store PATH (default $DLION_STORE or the user's data directory).
void addStoreOption(QCommandLineParser &parser);

// Opens the store named by --store; on failure prints "dlion CMD: <reason>"
// and returns false with the exit status in *exitCode (1).
bool openStore(const QString &command, const QCommandLineParser &parser, core::RunStore::Mode mode,
               core::RunStore &store, int *exitCode);

// Resolves a run id argument; on failure prints the reason (with how to
// list run ids) and sets *exitCode: 2 for an unknown id, 1 for a store error.
std::optional<qint64> resolveRun(const QString &command, core::RunStore &store, const QString &text, int *exitCode);

} // namespace dlion::cli
