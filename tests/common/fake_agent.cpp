#include "fake_agent.h"

#include <telemetry.h>

#include <QTcpSocket>

namespace dlion::test {

using protocol::Command;
using protocol::MessageType;
using protocol::WorkerState;

FakeAgent::FakeAgent(QByteArray secret, Script script, QObject *parent)
    : QObject(parent), m_secret(std::move(secret)), m_script(script)
{
    connect(&m_server, &QTcpServer::newConnection, this, &FakeAgent::onConnection);
    // Like a real agent: a sign of life with its state, job or not.
    m_heartbeat.setInterval(kHeartbeatMs);
    connect(&m_heartbeat, &QTimer::timeout, this, [this] {
        if (m_conn && m_conn->state() == protocol::FramedConnection::State::Ready)
            m_conn->send(MessageType::Heartbeat, {{"state", protocol::workerStateName(m_state)}});
    });
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
    m_heartbeat.start();
}

void FakeAgent::onFrame(const protocol::Frame &frame)
{
    if (frame.type == MessageType::Command) {
        const QString cmd = frame.body.value("cmd").toString();
        if (cmd != protocol::commandName(Command::Ack))
            m_commands.append(cmd);
        return onCommand(cmd, frame.body);
    }
    if (frame.type != MessageType::Job)
        return;
    m_jobReceived = true;
    if (m_script.fault == Fault::RefuseJob) {
        m_conn->send(MessageType::Finished, {{"ok", false}, {"message", "invalid job: scripted refusal"}});
        return;
    }
    m_worker = int(frame.body.value("rank").toInteger());
    m_world = int(qMax<qint64>(1, frame.body.value("world").toInteger()));
    play();
}

// What a real agent does with each command of a running job, as telemetry.
void FakeAgent::onCommand(const QString &cmd, const QCborMap &body)
{
    const std::optional<Command> c = protocol::commandFromName(cmd);
    if (!m_training || !c || !m_conn)
        return;
    switch (*c) {
    case Command::Stop:
        return finishJob();
    case Command::Pause:
    case Command::Resume:
        return sendState(*c == Command::Pause ? WorkerState::Paused : WorkerState::Running);
    case Command::MergeNow: {
        if (m_worker == 0)
            return;  // worker 0 plays the best replica: the others merge its model
        protocol::TelemetryBatch batch;
        batch.seq = ++m_seq;
        batch.merges.append({m_round, 0.1 * double(m_round), 0, m_worker, 0.5, 0.8, 0.5, true});
        m_conn->send(MessageType::Telemetry, protocol::toCbor(batch));
        return;
    }
    case Command::SetSlowdown:
        m_slowdown = body.value("value").toDouble(1);
        return sendRounds(1);
    case Command::SetLinkCap:
    case Command::Regroup:
    case Command::Shutdown:
    case Command::Ack:
        return;
    }
}

void FakeAgent::play()
{
    m_training = true;
    sendState(WorkerState::Running);
    sendRounds(m_script.rounds);
    switch (m_script.fault) {
    case Fault::Drop:
        m_heartbeat.stop();
        m_conn->close();
        return;
    case Fault::GoSilent:
        m_training = false;
        m_heartbeat.stop();
        return;
    case Fault::RefuseJob:
        return;
    case Fault::None:
    case Fault::SlowHandshake:
        break;
    }
    if (!m_script.untilStopped)
        finishJob();
}

// `count` more rounds, each with per-link estimates and an evaluation whose
// accuracy rises, in one Telemetry frame.
void FakeAgent::sendRounds(int count)
{
    protocol::TelemetryBatch batch;
    batch.seq = ++m_seq;
    for (int i = 0; i < count; ++i) {
        ++m_round;
        protocol::RoundRecord record;
        record.worker = m_worker;
        record.round = m_round;
        record.t = 0.1 * double(m_round);
        record.batch = 32;
        record.share = 1.0 / m_world;
        record.rate = 320 / m_slowdown;
        record.computeS = 0.1 * m_slowdown;
        record.loss = 2.0 / double(m_round);
        record.slowdown = m_slowdown;
        record.bytesSent = 1000 * m_round;
        for (int peer = 0; peer < m_world; ++peer) {
            const bool link = peer != m_worker;
            record.linkBytes.push_back(link ? 1000 : 0);
            record.linkMbps.push_back(link ? 10.0 * (peer + 1) : 0);
            record.linkFraction.push_back(link ? 0.5 : 0);
        }
        batch.rounds.append(record);
        protocol::EvalRecord eval;
        eval.worker = m_worker;
        eval.round = m_round;
        eval.t = record.t;
        eval.accuracy = eval.globalAccuracy = eval.minAccuracy = eval.maxAccuracy = qMin(0.9, 0.1 * double(m_round));
        eval.loss = eval.globalLoss = record.loss;
        eval.samples = 100;
        eval.primary = m_worker == 0;
        batch.evals.append(eval);
    }
    m_conn->send(MessageType::Telemetry, protocol::toCbor(batch));
}

void FakeAgent::sendState(WorkerState state)
{
    m_state = state;
    m_conn->send(MessageType::Status, {{"state", protocol::workerStateName(state)}});
}

void FakeAgent::finishJob()
{
    m_training = false;
    m_state = WorkerState::Idle;
    m_conn->send(MessageType::Finished, {{"ok", true}, {"message", QString()}, {"rounds", m_round}});
}

} // namespace dlion::test
