#include "structured_file.h"

#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>

#include <yaml-cpp/yaml.h>

namespace dlion::core {

namespace {

QJsonValue fromYaml(const YAML::Node &node)
{
    switch (node.Type()) {
    case YAML::NodeType::Map: {
        QJsonObject o;
        for (const auto &kv : node)
            o.insert(QString::fromStdString(kv.first.as<std::string>()), fromYaml(kv.second));
        return o;
    }
    case YAML::NodeType::Sequence: {
        QJsonArray a;
        for (const auto &item : node)
            a.append(fromYaml(item));
        return a;
    }
    case YAML::NodeType::Scalar: {
        const std::string s = node.Scalar();
        if (node.Tag() == "!")  // quoted: always a string
            return QString::fromStdString(s);
        if (s == "true" || s == "false")
            return s == "true";
        bool ok = false;
        const double d = QString::fromStdString(s).toDouble(&ok);
        if (ok)
            return d;
        return QString::fromStdString(s);
    }
    default:
        return QJsonValue::Null;
    }
}

} // namespace

std::optional<QJsonObject> readStructuredFile(const QString &path, QString *error)
{
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly)) {
        *error = QStringLiteral("cannot read %1: %2").arg(path, f.errorString());
        return std::nullopt;
    }
    const QByteArray text = f.readAll();
    const bool yamlName = path.endsWith(QLatin1String(".yaml")) || path.endsWith(QLatin1String(".yml"));
    if (!yamlName) {
        QJsonParseError perr;
        const QJsonDocument doc = QJsonDocument::fromJson(text, &perr);
        if (perr.error == QJsonParseError::NoError) {
            if (!doc.isObject()) {
                *error = QStringLiteral("%1: the top level must be an object").arg(path);
                return std::nullopt;
            }
            return doc.object();
        }
        if (path.endsWith(QLatin1String(".json"))) {
            const int line = int(text.left(perr.offset).count('\n')) + 1;
            *error = QStringLiteral("%1:%2: invalid JSON: %3").arg(path).arg(line).arg(perr.errorString());
            return std::nullopt;
        }
    }
    try {
        const YAML::Node root = YAML::Load(text.toStdString());
        if (!root.IsMap()) {
            *error = QStringLiteral("%1: the top level must be a mapping of fields").arg(path);
            return std::nullopt;
        }
        return fromYaml(root).toObject();
    } catch (const YAML::Exception &e) {
        *error = QStringLiteral("%1:%2: invalid YAML: %3").arg(path).arg(e.mark.line + 1).arg(QString::fromStdString(e.msg));
        return std::nullopt;
    }
}

} // namespace dlion::core
