#pragma once

#include <QStringList>

namespace dlion::cli {

// `dlion runs`: list, search and filter the recorded runs; --delete RUN.
// `dlion tag RUN TAG...` [--remove] and `dlion note RUN TEXT` annotate runs.
// Exit status: 0 success, 1 store failure, 2 bad usage or unknown run id.
int runsCommand(const QStringList &args);
int tagCommand(const QStringList &args);
int noteCommand(const QStringList &args);

} // namespace dlion::cli
