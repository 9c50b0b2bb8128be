#include "fake_agent.h"

#include <control_names.h>
#include <telemetry.h>

#include <QTcpSocket>
#include <QTimer>

namespace dlion::test {

using protocol::MessageType;

FakeAgent::FakeAgent(QByteArray secret, Script script, QObject *parent)
    : QObject(parent), m_secret(std::move(secret)), m_script(script)
{
    connect(&m_server, &QTcpServer::newConnection, this, &FakeAgent::onConnection);
}

bool FakeAgent::listen() { return m_server.listen(QHostAddress::LocalHost, 0); }

core::AgentEndpoint FakeAgent::endpoint() const { return {QStringLiteral("127.0.0.1"), m_server.serverPort()}; }

void FakeAgent::onConnection()
{
    while (QTcpSocket *socket = m_server.nextPendingConnection()) {
        if (m_script.fault == Fault::SlowHandshake)
            QTimer::singleShot(m_script.handshakeDelayMs, this, [this, socket] { greet(socket); });
        else
            greet(socket);
    }
}

void FakeAgent::greet(QTcpSocket *socket)
{
    m_conn = new protocol::FramedConnection(socket, protocol::FramedConnection::Role::Agent, m_secret, this);
    connect(m_conn, &protocol::FramedConnection::frameReceived, this, &FakeAgent::onFrame);
    m_conn->start();
}

void FakeAgent::onFrame(const protocol::Frame &frame)
{
    if (frame.type == MessageType::Command) {
        const QString cmd = frame.body.value("cmd").toString();
        if (cmd != protocol::commandName(protocol::Command::Ack))
            m_commands.append(cmd);
        return;
    }
    if (frame.type != MessageType::Job)
        return;
    m_jobReceived = true;
    if (m_script.fault == Fault::RefuseJob) {
        m_conn->send(MessageType::Finished, {{"ok", false}, {"message", "invalid job: scripted refusal"}});
        return;
    }
    play(int(frame.body.value("rank").toInteger()));
}

void FakeAgent::play(int worker)
{
    m_conn->send(MessageType::Status, {{"state", protocol::workerStateName(protocol::WorkerState::Running)}});
    protocol::TelemetryBatch batch;
    batch.seq = 1;
    for (int r = 1; r <= m_script.rounds; ++r) {
        protocol::RoundRecord record;
        record.worker = worker;
        record.round = r;
        record.t = 0.1 * r;
        record.batch = 32;
        batch.rounds.append(record);
    }
    m_conn->send(MessageType::Telemetry, protocol::toCbor(batch));
    switch (m_script.fault) {
    case Fault::Drop:
        m_conn->close();
        return;
    case Fault::GoSilent:
    case Fault::RefuseJob:
        return;
    case Fault::None:
    case Fault::SlowHandshake:
        break;
    }
    m_conn->send(MessageType::Finished, {{"ok", true}, {"message", QString()}, {"rounds", m_script.rounds}});
}

} // namespace dlion::test
