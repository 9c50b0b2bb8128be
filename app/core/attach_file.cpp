#include "attach_file.h"

#include <safe_file.h>

#include <QDir>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>

namespace dlion::core {

namespace {
constexpr qint64 kMaxBytes = 1 << 20;  // a few hundred bytes per agent
} // namespace

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
                        {"generation", generation},
                        {"grace_s", graceS}};
    // Written whole, owner-only from its creation (it holds the secret), then
    // renamed into place: a controller killed mid-write (or a reader polling
    // for the file) never sees a truncated file.
    return files::writeAtomically(pathIn(runDir), QJsonDocument(o).toJson(), error);
}

std::optional<AttachFile> AttachFile::read(const QString &runDir, QString *error)
{
    const QString path = pathIn(runDir);
    if (!QFileInfo::exists(path)) {
        *error = QStringLiteral("%1 is missing: only a run whose agents train on without a controller (a local run "
                                "started with a grace period, or a cluster run) and that has not ended can be reattached").arg(path);
        return std::nullopt;
    }
    const std::optional<QByteArray> text = files::readRegular(path, kMaxBytes, error);
    if (!text)
        return std::nullopt;
    const QJsonObject o = QJsonDocument::fromJson(*text).object();
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
    a.graceS = o.value("grace_s").toInt();
    if (a.runId <= 0 || a.store.isEmpty() || a.agents.isEmpty() || a.members.isEmpty() || a.secret.isEmpty()) {
        *error = QStringLiteral("%1 is not a valid attach file").arg(path);
        return std::nullopt;
    }
    return a;
}

QList<AttachableRun> findAttachableRuns(const QString &runsDir)
{
    QList<AttachableRun> found;
    const QDir dir(runsDir);
    for (const QString &name : dir.entryList(QDir::Dirs | QDir::NoDotAndDotDot)) {
        const QString runDir = dir.filePath(name);
        QString ignored;  // folders of ended runs have no attach file
        if (auto file = AttachFile::read(runDir, &ignored))
            found.append({runDir, *file, QFileInfo(AttachFile::pathIn(runDir)).lastModified()});
    }
    std::sort(found.begin(), found.end(), [](const AttachableRun &a, const AttachableRun &b) { return a.updated > b.updated; });
    return found;
}

} // namespace dlion::core
