#pragma once

#include <QJsonObject>
#include <QStringList>

#include <optional>

namespace dlion::core {

// Named job presets, one JSON file each in a folder (by default the
// application's data folder, "presets/").
class PresetStore {
public:
    explicit PresetStore(QString folder = QString());

    QStringList names() const;
    bool save(const QString &name, const QJsonObject &preset, QString *error) const;
    std::optional<QJsonObject> load(const QString &name, QString *error) const;
    QString folder() const { return m_folder; }

private:
    QString pathFor(const QString &name) const;
    QString m_folder;
};

} // namespace dlion::core
