#include "agent_connection.h"

#include "core_log.h"

#include <QTcpSocket>

#include <algorithm>
#include <utility>

namespace dlion::core {

Q_LOGGING_CATEGORY(lcSession, "dlion.session")

using protocol::FramedConnection;
using protocol::MessageType;

AgentConnection::AgentConnection(int worker, QString host, quint16 port, QByteArray secret, QObject *parent)
    : QObject(parent), m_worker(worker), m_host(std::move(host)), m_port(port), m_secret(std::move(secret))
{
    m_connectTimer.setSingleShot(true);
    connect(&m_connectTimer, &QTimer::timeout, this,
            [this] { markLost(QStringLiteral("agent %1 did not answer in time (is it running and reachable?)").arg(endpoint())); });
    m_watchdog.setInterval(1000);
    connect(&m_watchdog, &QTimer::timeout, this, [this] {
        if (m_state == State::Ready && m_lastFrame.elapsed() > m_heartbeatTimeoutMs)
            markLost(QStringLiteral("agent %1 went silent for %2 s").arg(endpoint()).arg(m_heartbeatTimeoutMs / 1000.0));
    });
}

void AgentConnection::open(int connectTimeoutMs)
{
    auto *socket = new QTcpSocket;
    m_conn = new FramedConnection(socket, FramedConnection::Role::Controller, m_secret, this);
    connect(m_conn, &FramedConnection::ready, this, [this] {
        m_connectTimer.stop();
        m_state = State::Ready;
        m_lastFrame.start();
        m_watchdog.start();
        Q_EMIT ready();
    });
    connect(m_conn, &FramedConnection::frameReceived, this, &AgentConnection::onFrame);
    connect(m_conn, &FramedConnection::receiving, this, [this] { m_lastFrame.restart(); });
    connect(m_conn, &FramedConnection::failed, this, [this](const QString &reason) { markLost(reason); });
    connect(m_conn, &FramedConnection::closed, this,
            [this] { markLost(QStringLiteral("agent %1 closed the connection").arg(endpoint())); });
    connect(socket, &QTcpSocket::connected, this, [this] {
        m_state = State::Authenticating;
        m_conn->start();
    });
    connect(socket, &QTcpSocket::errorOccurred, this, [this, socket](QAbstractSocket::SocketError) {
        if (m_state == State::Connecting)
            markLost(QStringLiteral("cannot connect to agent %1: %2").arg(endpoint(), socket->errorString()));
    });
    m_connectTimer.start(connectTimeoutMs);
    socket->connectToHost(m_host, m_port);
}

bool AgentConnection::sendJob(const QJsonObject &job)
{
    return m_state == State::Ready && m_conn->send(MessageType::Job, QCborMap::fromJsonObject(job));
}

bool AgentConnection::sendCommand(protocol::Command cmd, const QCborMap &args)
{
    if (m_state != State::Ready)
        return false;
    QCborMap body = args;
    body.insert(QStringLiteral("cmd"), protocol::commandName(cmd));
    return m_conn->send(MessageType::Command, body);
}

void AgentConnection::acknowledgeTelemetry()
{
    if (m_receivedSeq > m_ackedSeq && sendCommand(protocol::Command::Ack, QCborMap{{"seq", m_receivedSeq}}))
        m_ackedSeq = m_receivedSeq;
}

void AgentConnection::onFrame(const protocol::Frame &frame)
{
    m_lastFrame.restart();
    switch (frame.type) {
    case MessageType::Telemetry: {
        protocol::TelemetryBatch batch;
        if (!protocol::fromCbor(frame.body, &batch))
            return markLost(QStringLiteral("agent %1 sent malformed telemetry").arg(endpoint()));
        m_receivedSeq = std::max(m_receivedSeq, batch.seq);
        Q_EMIT telemetry(batch);
        return;
    }
    case MessageType::Status:
    case MessageType::Heartbeat: {
        if (frame.type == MessageType::Heartbeat)
            Q_EMIT heartbeat();
        noteAgentState(frame.body.value("state").toString());
        if (const QCborValue g = frame.body.value("failed_generation"); g.isInteger())
            Q_EMIT groupFailed(int(g.toInteger()), frame.body.value("message").toString());
        return;
    }
    case MessageType::Finished:
        Q_EMIT finished(frame.body);
        return;
    case MessageType::Error:
        Q_EMIT agentError(frame.body.value("message").toString());
        return;
    default:
        qCWarning(lcSession) << "ignoring unexpected" << messageTypeName(frame.type) << "from" << endpoint();
    }
}

void AgentConnection::noteAgentState(const QString &name)
{
    if (name.isEmpty())
        return;
    const std::optional<protocol::WorkerState> s = protocol::workerStateFromName(name);
    if (!s) {
        if (name == std::exchange(m_unknownState, name))
            return;  // said once; heartbeats repeat it
        Q_EMIT agentError(QStringLiteral("reports an unknown state \"%1\" (is the agent another version? deploy this one)").arg(name));
        return;
    }
    if (s != m_agentState) {
        m_agentState = s;
        Q_EMIT agentStateChanged(*s);
    }
}

void AgentConnection::markLost(const QString &reason)
{
    if (m_state == State::Lost)
        return;
    m_state = State::Lost;
    m_connectTimer.stop();
    m_watchdog.stop();
    if (m_conn)
        m_conn->close();
    Q_EMIT lost(reason);
}

} // namespace dlion::core
