#pragma once

#include <QStringList>

namespace dlion::cli {

// `dlion report RUN [--format html|pdf|csv|json] [-o PATH]` and
// `dlion compare RUN RUN... [--baseline RUN] [--format text|json|html]`.
// Exit status: 0 success, 1 failure (store, output path), 2 bad usage or
// unknown run id. Both need a QApplication: see runPlottingCommand().
int reportCommand(const QStringList &args);
int compareCommand(const QStringList &args);

// True for the commands that draw plots (they need a QApplication).
bool isPlottingCommand(const char *command);
// Creates a QApplication (offscreen unless QT_QPA_PLATFORM says otherwise:
// the CLI never opens a window) and runs the plotting command argv[1].
int runPlottingCommand(int argc, char **argv);

} // namespace dlion::cli
