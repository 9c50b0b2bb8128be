#pragma once
// A stand-in for dlion-agent on loopback that speaks the real control
// protocol (FramedConnection and its handshake) and plays a script, with
// the failures a real agent can show, so session and GUI tests run alone
// and in seconds.
#include <agent_endpoint.h>
#include <framed_connection.h>

#include <QPointer>
#include <QStringList>
#include <QTcpServer>

namespace dlion::test {

class FakeAgent : public QObject {
    Q_OBJECT
public:
    enum class Fault {
        None,        // trains: running, telemetry, finished
        Drop,        // drops the connection after its telemetry
        GoSilent,    // sends its telemetry, then nothing at all
        RefuseJob,   // answers the job as an agent does an invalid one
        SlowHandshake,  // greets the controller only after `handshakeDelayMs`, then trains
    };
    struct Script {
        Fault fault = Fault::None;
        int rounds = 5;  // round records sent after the job
        int handshakeDelayMs = 300;
    };

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
    void play(int worker);

    QByteArray m_secret;
    Script m_script;
    QTcpServer m_server;
    QPointer<protocol::FramedConnection> m_conn;
    QStringList m_commands;
    bool m_jobReceived = false;
};

} // namespace dlion::test
