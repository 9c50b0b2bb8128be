#include "structured_file.h"

#include <safe_file.h>

#include <QJsonArray>
#include <QJsonDocument>

#include <yaml-cpp/yaml.h>

#include <algorithm>

namespace dlion::core {

namespace {

// Job and cluster files are small; these bounds turn an alias bomb (a few
// lines that expand exponentially) or absurd nesting into an error.
constexpr int kMaxNodes = 100000;
constexpr int kMaxDepth = 64;
constexpr qint64 kMaxFileBytes = 1 << 20;

QString tooDeepMessage() { return QStringLiteral("nested deeper than %1 levels").arg(kMaxDepth); }

// JSON gets YAML's depth bound (Qt's own parser allows 1024 levels). Stops
// at the bound, so the recursion is as shallow as the files it accepts.
bool nestedTooDeep(const QJsonValue &value, int depth)
{
    if (depth > kMaxDepth)
        return true;
    if (value.isObject()) {
        const QJsonObject o = value.toObject();
        return std::any_of(o.begin(), o.end(), [&](const QJsonValue &v) { return nestedTooDeep(v, depth + 1); });
    }
    const QJsonArray a = value.toArray();  // empty for a scalar
    return std::any_of(a.begin(), a.end(), [&](const QJsonValue &v) { return nestedTooDeep(v, depth + 1); });
}

struct YamlReader {
    int nodes = 0;
    QString error;

    QJsonValue read(const YAML::Node &node, int depth)
    {
        if (!error.isEmpty())
            return {};
        if (++nodes > kMaxNodes || depth > kMaxDepth) {
            error = nodes > kMaxNodes ? QStringLiteral("more than %1 values (aliases expanding without end?)").arg(kMaxNodes)
                                      : tooDeepMessage();
            return {};
        }
        switch (node.Type()) {
        case YAML::NodeType::Map: {
            QJsonObject o;
            for (const auto &kv : node) {
                if (!kv.first.IsScalar()) {
                    error = QStringLiteral("line %1: a field name must be plain text").arg(kv.first.Mark().line + 1);
                    return {};
                }
                const QString key = QString::fromStdString(kv.first.Scalar());
                if (o.contains(key)) {
                    error = QStringLiteral("line %1: field \"%2\" appears twice").arg(kv.first.Mark().line + 1).arg(key);
                    return {};
                }
                o.insert(key, read(kv.second, depth + 1));
            }
            return o;
        }
        case YAML::NodeType::Sequence: {
            QJsonArray a;
            for (const auto &item : node)
                a.append(read(item, depth + 1));
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
};

} // namespace

std::optional<QJsonObject> readStructuredFile(const QString &path, QString *error)
{
    const std::optional<QByteArray> loaded = files::readRegular(path, kMaxFileBytes, error);
    if (!loaded)
        return std::nullopt;
    const QByteArray &text = *loaded;
    const bool yamlName = path.endsWith(QLatin1String(".yaml")) || path.endsWith(QLatin1String(".yml"));
    if (!yamlName) {
        QJsonParseError perr;
        const QJsonDocument doc = QJsonDocument::fromJson(text, &perr);
        if (perr.error == QJsonParseError::NoError) {
            if (!doc.isObject()) {
                *error = QStringLiteral("%1: the top level must be an object").arg(path);
                return std::nullopt;
            }
            if (nestedTooDeep(doc.object(), 0)) {
                *error = QStringLiteral("%1: %2").arg(path, tooDeepMessage());
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
        YamlReader reader;
        const QJsonObject object = reader.read(root, 0).toObject();
        if (!reader.error.isEmpty()) {
            *error = QStringLiteral("%1: %2").arg(path, reader.error);
            return std::nullopt;
        }
        return object;
    } catch (const YAML::Exception &e) {
        *error = QStringLiteral("%1:%2: invalid YAML: %3").arg(path).arg(e.mark.line + 1).arg(QString::fromStdString(e.msg));
        return std::nullopt;
    }
}

} // namespace dlion::core
