#pragma once

#include <QJsonObject>
#include <QString>

#include <optional>

namespace dlion::core {

// Reads a job or cluster file: JSON, or YAML (by extension .yaml/.yml, or
// when the text is not JSON). The top level must be a mapping. On error
// returns nullopt and a message naming the file and the line.
std::optional<QJsonObject> readStructuredFile(const QString &path, QString *error);

} // namespace dlion::core
