#include "attach_file.h"

#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>

namespace dlion::core {

QString AttachFile::pathIn(const QString &runDir)
{
    return QDir(runDir).filePath(QStringLiteral("attach.json"));
}

bool AttachFile::write(const QString &runDir, QString *error) const
{
    QJsonArray endpoints, ids;
    for (const AgentEndpoint &e : agents)
        endpoints.append(QJsonArray{e.host, e.port});
    for (int w : members)
        ids.append(w);
    const QJsonObject o{{"run_id", runId},
                        {"store", store},
                        {"endpoints", endpoints},
                        {"secret", QString::fromLatin1(secret.toBase64())},
                        {"rendezvous_host", rendezvousHost},
                        {"rendezvous_port", rendezvousPort},
                        {"members", ids},
                        {"generation", generation}};
    QFile f(pathIn(runDir));
    if (f.open(QIODevice::WriteOnly | QIODevice::Truncate) && f.setPermissions(QFile::ReadOwner | QFile::WriteOwner)
        && f.write(QJsonDocument(o).toJson()) >= 0)
        return true;
    *error = QStringLiteral("cannot write %1: %2").arg(f.fileName(), f.errorString());
    return false;
}

std::optional<AttachFile> AttachFile::read(const QString &runDir, QString *error)
{
    QFile f(pathIn(runDir));
    if (!f.open(QIODevice::ReadOnly)) {
        *error = QStringLiteral("%1 is missing: only a local run started with a grace period that has not ended can be "
                                "reattached").arg(f.fileName());
        return std::nullopt;
    }
    const QJsonObject o = QJsonDocument::fromJson(f.readAll()).object();
    AttachFile a;
    a.runId = o.value("run_id").toInteger();
    a.store = o.value("store").toString();
    for (const QJsonValue &e : o.value("endpoints").toArray())
        a.agents.append({e.toArray().at(0).toString(), quint16(e.toArray().at(1).toInt())});
    a.secret = QByteArray::fromBase64(o.value("secret").toString().toLatin1());
    a.rendezvousHost = o.value("rendezvous_host").toString();
    a.rendezvousPort = quint16(o.value("rendezvous_port").toInt());
    for (const QJsonValue &w : o.value("members").toArray())
        a.members.append(w.toInt());
    a.generation = o.value("generation").toInt();
    if (a.runId <= 0 || a.store.isEmpty() || a.agents.isEmpty() || a.members.isEmpty() || a.secret.isEmpty()) {
        *error = QStringLiteral("%1 is not a valid attach file").arg(f.fileName());
        return std::nullopt;
    }
    return a;
}

} // namespace dlion::core
