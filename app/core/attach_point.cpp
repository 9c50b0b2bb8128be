#include "attach_point.h"

#include "run_recorder.h"
#include "run_session.h"

#include <QFile>

namespace dlion::core {

AttachPoint::AttachPoint(RunSession *session, const RunRecorder *recorder, QString runDir, AttachFile file, QObject *parent)
    : QObject(parent), m_session(session), m_recorder(recorder), m_runDir(std::move(runDir)), m_file(std::move(file))
{
    connect(session, &RunSession::stateChanged, this, [this](RunSession::State s) {
        if (s == RunSession::State::Running)
            write();
    });
    connect(session, &RunSession::groupChanged, this, &AttachPoint::write);
    connect(session, &RunSession::finished, this, [this] { QFile::remove(AttachFile::pathIn(m_runDir)); });
    if (session->state() == RunSession::State::Running)
        write();
}

void AttachPoint::leave()
{
    m_session->disconnect(this);
}

void AttachPoint::write()
{
    m_file.runId = m_recorder->runId();
    m_file.members = m_session->members();
    m_file.generation = m_session->generation();
    if (QString error; !m_file.write(m_runDir, &error))
        Q_EMIT writeFailed(QStringLiteral("%1; this run cannot be reattached").arg(error));
}

} // namespace dlion::core
