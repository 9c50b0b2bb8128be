#pragma once

#include <control_names.h>
#include <framed_connection.h>
#include <telemetry.h>

#include <QCborMap>
#include <QElapsedTimer>
#include <QObject>
#include <QPointer>
#include <QTimer>

#include <optional>

namespace dlion::core {

// The control center's link to one agent.
//
// States: Connecting -> Authenticating -> Ready -> (Finished | Lost).
// `lost()` fires once with a reason when the connection cannot be made,
// authentication fails, the connection drops, or the agent stays silent
// longer than the heartbeat timeout.
class AgentConnection : public QObject {
    Q_OBJECT
public:
    enum class State { Connecting, Authenticating, Ready, Lost };
    static constexpr int kDefaultHeartbeatTimeoutMs = 15000;

    AgentConnection(int worker, QString host, quint16 port, QByteArray secret, QObject *parent = nullptr);

    void open(int connectTimeoutMs = 10000);
    bool sendJob(const QJsonObject &job);
    bool sendCommand(protocol::Command cmd, const QCborMap &args = {});
    // Tells the agent that every telemetry frame received so far is safe
    // (stored, or not meant to be), so it stops keeping them for a replay.
    void acknowledgeTelemetry();

    int worker() const { return m_worker; }
    const QString &host() const { return m_host; }
    QString endpoint() const { return QStringLiteral("%1:%2").arg(m_host).arg(m_port); }
    State state() const { return m_state; }
    std::optional<protocol::WorkerState> agentState() const { return m_agentState; }
    qint64 msSinceLastFrame() const { return m_lastFrame.isValid() ? m_lastFrame.elapsed() : -1; }
    void setHeartbeatTimeout(int ms) { m_heartbeatTimeoutMs = ms; }

Q_SIGNALS:
    void ready();
    void agentStateChanged(dlion::protocol::WorkerState state);
    // The agent's worker could not form group generation `generation`.
    void groupFailed(int generation, const QString &why);
    void heartbeat();
    void telemetry(const dlion::protocol::TelemetryBatch &batch);
    void finished(const QCborMap &outcome);
    void agentError(const QString &message);
    void lost(const QString &reason);

private:
    void onFrame(const protocol::Frame &frame);
    void noteAgentState(const QString &name);
    void markLost(const QString &reason);

    int m_worker;
    QString m_host;
    quint16 m_port;
    QByteArray m_secret;
    State m_state = State::Connecting;
    std::optional<protocol::WorkerState> m_agentState;
    QString m_unknownState;
    QPointer<protocol::FramedConnection> m_conn;
    QTimer m_connectTimer;
    QTimer m_watchdog;
    QElapsedTimer m_lastFrame;
    int m_heartbeatTimeoutMs = kDefaultHeartbeatTimeoutMs;
    qint64 m_receivedSeq = 0;
    qint64 m_ackedSeq = 0;
};

} // namespace dlion::core
