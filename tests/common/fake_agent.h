#pragma once
// A stand-in for dlion-agent on loopback that speaks the real control
// protocol (FramedConnection and its handshake, telemetry.h records) and
// plays a script, with the failures a real agent can show, so session and
// GUI tests run alone and in seconds.
#include <agent_endpoint.h>
#include <control_names.h>
#include <framed_connection.h>

#include <QPointer>
#include <QStringList>
#include <QTcpServer>
#include <QTimer>

namespace dlion::test {

class FakeAgent : public QObject {
    Q_OBJECT
public:
    enum class Fault {
        None,        // trains: running, telemetry, finished
        Drop,        // drops the connection after its telemetry
        GoSilent,    // sends its telemetry, then nothing at all (no heartbeats either)
        RefuseJob,   // answers the job as an agent does an invalid one
        SlowHandshake,  // greets the controller only after `handshakeDelayMs`, then trains
    };
    struct Script {
        Fault fault = Fault::None;
        int rounds = 5;  // round records (with link estimates and an evaluation each) sent after the job
        int handshakeDelayMs = 300;
        // After its rounds: finish at once, or train on (heartbeats, and
        // answers to pause, resume, merge and slowdown) until told to stop.
        bool untilStopped = false;
    };
    static constexpr int kHeartbeatMs = 200;

    FakeAgent(QByteArray secret, Script script, QObject *parent = nullptr);

    // Listens on 127.0.0.1, on a free port; false if it cannot.
    bool listen();
    core::AgentEndpoint endpoint() const;
    // Command names received, in order ("ack" left out).
    const QStringList &commands() const { return m_commands; }
    bool jobReceived() const { return m_jobReceived; }

private:
    void onConnection();
    void greet(QTcpSocket *socket);
    void onFrame(const protocol::Frame &frame);
    void onCommand(const QString &cmd, const QCborMap &body);
    void play();
    void sendRounds(int count);
    void sendState(protocol::WorkerState state);
    void finishJob();

    QByteArray m_secret;
    Script m_script;
    QTcpServer m_server;
    QPointer<protocol::FramedConnection> m_conn;
    QTimer m_heartbeat;
    QStringList m_commands;
    bool m_jobReceived = false;
    bool m_training = false;
    int m_worker = 0;
    int m_world = 1;
    qint64 m_round = 0;
    qint64 m_seq = 0;
    double m_slowdown = 1;
    protocol::WorkerState m_state = protocol::WorkerState::Idle;
};

} // namespace dlion::test
