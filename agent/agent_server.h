#pragma once

#include "job_runner.h"

#include <control_names.h>
#include <framed_connection.h>

#include <QElapsedTimer>
#include <QHostAddress>
#include <QObject>
#include <QPointer>
#include <QTcpServer>
#include <QTimer>

#include <deque>
#include <memory>

namespace dlion::agent {

// The control server of a dlion-agent: accepts authenticated controllers,
// runs one job at a time and streams its telemetry.
//
// A controller that connects and authenticates replaces the previous one
// (so a restarted control center can reattach). While no controller is
// attached, telemetry is kept and delivered on reattach; if none reattaches
// within the grace period the job is stopped.
//
// Telemetry is delivered at least once: every frame sent is kept until the
// controller acknowledges it (after storing it), and a reattaching controller
// gets the unacknowledged frames again before the new ones.
//
// Before authentication a connection costs little: at most
// kMaxHandshaking wait at once (a new one closes the oldest), each for a
// few seconds with small frames; the listener keeps accepting after running
// out of descriptors.
class AgentServer : public QObject {
    Q_OBJECT
public:
    struct Options {
        QHostAddress address = QHostAddress::LocalHost;
        quint16 port = 0;
        QByteArray secret;
        int graceS = 30;
        int idleExitS = 0;  // exit after this long with no job and no controller (0 = never)
    };

    explicit AgentServer(Options options, QObject *parent = nullptr);
    ~AgentServer() override;

    bool listen(QString *error);
    quint16 port() const { return m_server.serverPort(); }

Q_SIGNALS:
    void shutdownRequested();

private:
    // Counts events to log: the first at once, then at most one line per
    // interval with the count since the last line.
    class LogThrottle {
    public:
        // How many events to report now (0: stay quiet).
        qint64 count();

    private:
        QElapsedTimer m_lastLine;
        qint64 m_unreported = 0;
    };

    void onNewConnection();
    void accept(QTcpSocket *socket);
    // Unauthenticated connections, oldest first.
    QList<protocol::FramedConnection *> handshaking() const;
    void onAcceptError(QAbstractSocket::SocketError error);
    void onFrame(const protocol::Frame &frame);
    void onControllerClosed();
    void startJob(const QCborMap &body);
    // Tells the controller the job cannot start, and why.
    void refuseJob(const QString &message);
    void handleCommand(const QCborMap &body);
    bool runCommand(protocol::Command command, const QCborMap &body);
    void regroup(const QCborMap &planBody);
    void capBacklog();
    void flushTelemetry();
    void sendTelemetry(const protocol::TelemetryBatch &batch);
    void acknowledge(const QCborValue &seq);
    QString stateName() const;
    void sendStatus(const QString &message = {});
    void sendError(const QString &message);
    void onJobFinished(bool ok, const QString &message, const engine::WorkerResult &result);
    // The run's final model and what describes it, into m_finished.
    void addFinalModel(const engine::FinalModel &model);
    void updateIdleTimer();

    Options m_options;
    QTcpServer m_server;
    QPointer<protocol::FramedConnection> m_controller;
    std::unique_ptr<JobRunner> m_runner;
    protocol::TelemetryBatch m_backlog;             // not sent yet
    std::deque<protocol::TelemetryBatch> m_unacked;  // sent, not acknowledged, in seq order
    qsizetype m_unackedRecords = 0;
    qint64 m_lastSeq = 0;  // rises over the agent's life, across jobs
    bool m_warnedUnackedFull = false;
    bool m_warnedBacklogFull = false;
    LogThrottle m_evictedLog;
    LogThrottle m_acceptErrorLog;
    QTimer m_resumeAcceptTimer;
    QCborMap m_finished;  // last job's outcome, re-sent to a reattaching controller
    QTimer m_flushTimer;
    QTimer m_heartbeatTimer;
    QTimer m_graceTimer;
    QTimer m_idleTimer;
    bool m_shutdownAfterJob = false;
};

} // namespace dlion::agent
