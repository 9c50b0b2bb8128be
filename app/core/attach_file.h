#pragma once

#include "agent_endpoint.h"

#include <QDateTime>
#include <QList>
#include <QString>

#include <optional>

namespace dlion::core {

// RUN_DIR/attach.json: what a control center needs to take over a running
// job whose controller went away (agents started with a grace period).
// Owner-only: it holds the run secret.
struct AttachFile {
    qint64 runId = 0;
    QString store;
    QList<AgentEndpoint> agents;
    QByteArray secret;
    QString rendezvousHost;
    quint16 rendezvousPort = 0;
    QList<int> members;
    int generation = 0;
    int graceS = 0;  // how long the agents train on without a controller

    static QString pathIn(const QString &runDir);
    bool write(const QString &runDir, QString *error) const;
    // A clear error when the file is missing or not a valid attach file.
    static std::optional<AttachFile> read(const QString &runDir, QString *error);
};

struct AttachableRun {
    QString runDir;
    AttachFile file;
    QDateTime updated;  // the file's last write: the group's last change
};
// The reattachable runs in the subfolders of `runsDir`, newest first.
QList<AttachableRun> findAttachableRuns(const QString &runsDir);

} // namespace dlion::core
