#pragma once

#include "attach_file.h"

#include <QObject>

namespace dlion::core {

class RunRecorder;
class RunSession;

// Keeps RUN_DIR/attach.json current while a reattachable run goes on:
// written once the session runs and at every regroup, removed when the run
// ends. A control center that crashes, or leaves on purpose (`leave()`),
// leaves the file for the next one to take the run over with.
class AttachPoint : public QObject {
    Q_OBJECT
public:
    // `file` holds the agents, secret, rendezvous and grace; the run id and
    // the group come from `recorder` and `session` at each write.
    AttachPoint(RunSession *session, const RunRecorder *recorder, QString runDir, AttachFile file,
                QObject *parent = nullptr);

    QString runDir() const { return m_runDir; }
    int graceS() const { return m_file.graceS; }
    // Stops maintaining the file and leaves it in place.
    void leave();

Q_SIGNALS:
    void writeFailed(const QString &message);

private:
    void write();

    RunSession *m_session;
    const RunRecorder *m_recorder;
    QString m_runDir;
    AttachFile m_file;
};

} // namespace dlion::core
