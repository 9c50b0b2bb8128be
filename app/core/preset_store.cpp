#include "preset_store.h"

#include <safe_file.h>

#include <QDir>
#include <QFile>
#include <QJsonDocument>
#include <QRegularExpression>
#include <QStandardPaths>

namespace dlion::core {

PresetStore::PresetStore(QString folder) : m_folder(std::move(folder))
{
    if (m_folder.isEmpty())
        m_folder = QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) + QStringLiteral("/presets");
}

QString PresetStore::pathFor(const QString &name) const
{
    return QDir(m_folder).filePath(name + QStringLiteral(".json"));
}

QStringList PresetStore::names() const
{
    QStringList out;
    for (const QFileInfo &f : QDir(m_folder).entryInfoList({QStringLiteral("*.json")}, QDir::Files, QDir::Name))
        out << f.completeBaseName();
    return out;
}

bool PresetStore::save(const QString &name, const QJsonObject &preset, QString *error) const
{
    static const QRegularExpression valid(QStringLiteral("^[\\w .-]{1,64}$"));
    if (!valid.match(name).hasMatch() || name.startsWith('.')) {
        *error = QObject::tr("Preset name \"%1\" is not allowed: use letters, digits, spaces, '.', '-' or '_'.").arg(name);
        return false;
    }
    if (!QDir().mkpath(m_folder)) {
        *error = QObject::tr("Cannot create the preset folder %1.").arg(m_folder);
        return false;
    }
    return files::writeAtomically(pathFor(name), QJsonDocument(preset).toJson(), error);
}

std::optional<QJsonObject> PresetStore::load(const QString &name, QString *error) const
{
    QFile f(pathFor(name));
    if (!f.open(QIODevice::ReadOnly)) {
        *error = QObject::tr("Cannot read preset %1: %2").arg(f.fileName(), f.errorString());
        return std::nullopt;
    }
    QJsonParseError parse;
    const QJsonDocument doc = QJsonDocument::fromJson(f.readAll(), &parse);
    if (!doc.isObject()) {
        *error = QObject::tr("Preset %1 is not a JSON object (%2); fix or delete the file.").arg(f.fileName(), parse.errorString());
        return std::nullopt;
    }
    return doc.object();
}

} // namespace dlion::core
