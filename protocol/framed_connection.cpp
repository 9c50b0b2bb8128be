#include "framed_connection.h"

#include "handshake.h"
#include "protocol_log.h"

#include <dlion_version.h>
#include <QCoreApplication>
#include <QTcpSocket>

namespace dlion::protocol {

Q_LOGGING_CATEGORY(lcLink, "dlion.link")

namespace {
// What Qt reads ahead of the codec: with the codec's frame limit it bounds
// what an unauthenticated peer can make us hold.
constexpr qint64 kReadBufferSize = 256 * 1024;
} // namespace

FramedConnection::FramedConnection(QTcpSocket *socket, Role role, QByteArray secret, QObject *parent)
    : QObject(parent), m_socket(socket), m_role(role), m_secret(std::move(secret))
{
    socket->setParent(this);
    socket->setSocketOption(QAbstractSocket::LowDelayOption, 1);
    socket->setReadBufferSize(kReadBufferSize);
    connect(socket, &QTcpSocket::readyRead, this, &FramedConnection::onReadyRead);
    connect(socket, &QTcpSocket::disconnected, this, [this] {
        if (m_state == State::Handshaking)
            Q_EMIT failed(QStringLiteral("%1 closed the connection during the handshake").arg(peerName()));
        if (m_state != State::Closed) {
            m_state = State::Closed;
            Q_EMIT closed();
        }
    });
    m_handshakeTimer.setSingleShot(true);
    connect(&m_handshakeTimer, &QTimer::timeout, this,
            [this] { fail(QStringLiteral("handshake with %1 timed out").arg(peerName())); });
}

FramedConnection::~FramedConnection()
{
    // Frames sent just before a process exits (a last "shutdown") must leave.
    if (m_socket && m_socket->state() == QAbstractSocket::ConnectedState && m_socket->bytesToWrite() > 0) {
        m_socket->flush();
        m_socket->waitForBytesWritten(500);
    }
}

QString FramedConnection::peerName() const
{
    if (!m_socket)
        return QStringLiteral("peer");
    return QStringLiteral("%1:%2").arg(m_socket->peerAddress().toString()).arg(m_socket->peerPort());
}

void FramedConnection::start(int handshakeTimeoutMs)
{
    m_handshakeTimer.start(handshakeTimeoutMs);
    if (m_role == Role::Agent) {
        m_agentNonce = handshake::makeNonce();
        send(MessageType::Hello, QCborMap{{"version", kProtocolVersion},
                                          {"nonce", m_agentNonce},
                                          {"agent", QCoreApplication::applicationName()},
                                          {"agent_version", QStringLiteral(DLION_VERSION)}});
    }
    if (m_socket && m_socket->bytesAvailable() > 0)
        onReadyRead();
}

bool FramedConnection::send(MessageType type, const QCborMap &body)
{
    if (!m_socket || m_state == State::Closed)
        return false;
    m_socket->write(m_codec.encode(Frame{type, body}));
    return true;
}

void FramedConnection::close()
{
    if (m_state == State::Closed)
        return;
    m_handshakeTimer.stop();
    m_state = State::Closed;
    if (m_socket) {
        m_socket->flush();
        m_socket->disconnectFromHost();
    }
    Q_EMIT closed();
}

void FramedConnection::fail(const QString &reason)
{
    if (m_state == State::Closed)
        return;
    qCWarning(lcLink).noquote() << "dropping" << peerName() << ":" << reason;
    Q_EMIT failed(reason);
    if (m_socket)
        m_socket->abort();
    m_handshakeTimer.stop();
    m_state = State::Closed;
    Q_EMIT closed();
}

void FramedConnection::onReadyRead()
{
    if (!m_socket || m_state == State::Closed)
        return;
    if (!m_codec.feed(m_socket->readAll()))
        return fail(m_codec.errorString());
    // The guard stops delivery if a handler closed or deleted us.
    QPointer<FramedConnection> self(this);
    while (self && m_state != State::Closed) {
        const qint64 partBefore = m_codec.partialMessageBytes();
        std::optional<Frame> frame = m_codec.next();
        if (!frame) {
            if (m_codec.hasError())
                fail(m_codec.errorString());
            else if (m_codec.partialMessageBytes() > partBefore)
                Q_EMIT receiving(m_codec.partialMessageBytes());
            return;
        }
        if (m_state == State::Handshaking)
            handleHandshake(*frame);
        else
            Q_EMIT frameReceived(*frame);
    }
}

void FramedConnection::handleHandshake(const Frame &frame)
{
    using namespace handshake;
    if (m_role == Role::Controller && frame.type == MessageType::Hello && m_agentNonce.isEmpty()) {
        m_agentNonce = frame.body.value("nonce").toByteArray();
        if (frame.body.value("version").toInteger() != kProtocolVersion || m_agentNonce.size() != kNonceSize)
            return fail(QStringLiteral("%1 is not a compatible dlion-agent").arg(peerName()));
        m_controllerNonce = makeNonce();
        send(MessageType::Auth, QCborMap{{"nonce", m_controllerNonce},
                                         {"proof", controllerProof(m_secret, m_agentNonce, m_controllerNonce)}});
        return;
    }
    if (m_role == Role::Agent && frame.type == MessageType::Auth && m_controllerNonce.isEmpty()) {
        m_controllerNonce = frame.body.value("nonce").toByteArray();
        const QByteArray proof = frame.body.value("proof").toByteArray();
        if (m_controllerNonce.size() != kNonceSize
            || !equal(proof, controllerProof(m_secret, m_agentNonce, m_controllerNonce)))
            return fail(QStringLiteral("controller at %1 failed authentication (wrong run secret)").arg(peerName()));
        send(MessageType::AuthOk, QCborMap{{"proof", agentProof(m_secret, m_agentNonce, m_controllerNonce)}});
    } else if (m_role == Role::Controller && frame.type == MessageType::AuthOk && !m_controllerNonce.isEmpty()) {
        if (!equal(frame.body.value("proof").toByteArray(), agentProof(m_secret, m_agentNonce, m_controllerNonce)))
            return fail(QStringLiteral("agent at %1 failed authentication (wrong run secret)").arg(peerName()));
    } else {
        return fail(QStringLiteral("unexpected %1 frame during the handshake with %2")
                        .arg(QLatin1String(messageTypeName(frame.type)), peerName()));
    }
    const QByteArray toController = agentToControllerKey(m_secret, m_agentNonce, m_controllerNonce);
    const QByteArray toAgent = controllerToAgentKey(m_secret, m_agentNonce, m_controllerNonce);
    if (m_role == Role::Agent)
        m_codec.setKeys(toController, toAgent);
    else
        m_codec.setKeys(toAgent, toController);
    m_handshakeTimer.stop();
    m_state = State::Ready;
    Q_EMIT ready();
}

} // namespace dlion::protocol
