#pragma once

#include <QStringList>

namespace dlion::cli {

// `dlion export RUN -o FILE`: writes a recorded run's final model for
// Python; `dlion export --checkpoint FILE -o FILE` a checkpoint's. Exit status: 0 success, 1 failure (store, files), 2 bad usage or
// unknown run id.
int exportCommand(const QStringList &args);

} // namespace dlion::cli
