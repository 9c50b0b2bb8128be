#include "ssh_config_import.h"

#include <QDir>
#include <QFile>
#include <QRegularExpression>

namespace dlion::core {

namespace {

struct Block {
    QStringList aliases;
    QHash<QString, QString> options;  // lower-case keyword -> first value (OpenSSH: first wins)
};

QString expandHome(QString path)
{
    if (path.startsWith(QLatin1String("~/")))
        path = QDir::homePath() + path.mid(1);
    return path;
}

} // namespace

QList<QJsonObject> SshConfigImport::parse(const QString &text)
{
    QList<Block> blocks{Block{}};  // the first block holds global defaults
    static const QRegularExpression split(QStringLiteral("^\\s*(\\S+)\\s*(?:=\\s*|\\s+)(.*?)\\s*$"));
    for (const QString &line : text.split('\n')) {
        const QString trimmed = line.trimmed();
        if (trimmed.isEmpty() || trimmed.startsWith('#'))
            continue;
        const auto m = split.match(trimmed);
        if (!m.hasMatch())
            continue;
        const QString key = m.captured(1).toLower();
        QString value = m.captured(2);
        if (value.size() >= 2 && value.startsWith('"') && value.endsWith('"'))
            value = value.mid(1, value.size() - 2);
        if (key == QLatin1String("host")) {
            blocks.append(Block{value.split(QRegularExpression(QStringLiteral("\\s+")), Qt::SkipEmptyParts), {}});
        } else if (key == QLatin1String("match")) {
            blocks.append(Block{});  // conditional blocks are not evaluated
        } else if (!blocks.last().options.contains(key)) {
            blocks.last().options.insert(key, value);
        }
    }
    QHash<QString, QString> defaults = blocks.first().options;
    for (const Block &b : std::as_const(blocks)) {
        if (b.aliases == QStringList{QStringLiteral("*")}) {
            for (auto it = b.options.cbegin(); it != b.options.cend(); ++it)
                defaults.insert(it.key(), it.value());
        }
    }
    QList<QJsonObject> hosts;
    for (const Block &b : std::as_const(blocks)) {
        for (const QString &alias : b.aliases) {
            if (alias.contains('*') || alias.contains('?') || alias.startsWith('!'))
                continue;
            auto opt = [&](const char *k) { return b.options.value(QLatin1String(k), defaults.value(QLatin1String(k))); };
            QJsonObject h{{"name", alias}, {"address", opt("hostname").isEmpty() ? alias : opt("hostname")}};
            h.insert("port", opt("port").isEmpty() ? 22 : opt("port").toInt());
            if (!opt("user").isEmpty())
                h.insert("user", opt("user"));
            if (!opt("identityfile").isEmpty()) {
                h.insert("auth", QStringLiteral("key"));
                h.insert("key_file", expandHome(opt("identityfile")));
            } else {
                h.insert("auth", QStringLiteral("agent"));
            }
            hosts.append(h);
        }
    }
    return hosts;
}

QList<QJsonObject> SshConfigImport::readFile(const QString &path, QString *error)
{
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly | QIODevice::Text)) {
        *error = QObject::tr("Cannot read %1: %2").arg(path, f.errorString());
        return {};
    }
    return parse(QString::fromUtf8(f.readAll()));
}

QString SshConfigImport::defaultPath()
{
    return QDir::homePath() + QStringLiteral("/.ssh/config");
}

} // namespace dlion::core
