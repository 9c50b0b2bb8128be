#pragma once

#include <QJsonObject>
#include <QList>
#include <QString>

namespace dlion::core {

// Reads the concrete hosts of an OpenSSH client config (`~/.ssh/config`):
// each `Host` alias without wildcards becomes a cluster-file host entry
// (name, address, port, user, auth, key_file). Options before the first
// `Host` or in `Host *` blocks are defaults for all.
class SshConfigImport {
public:
    static QList<QJsonObject> parse(const QString &text);
    static QList<QJsonObject> readFile(const QString &path, QString *error);
    static QString defaultPath();
};

} // namespace dlion::core
