#pragma once

#include "frame_codec.h"

#include <QObject>
#include <QPointer>
#include <QTimer>

class QTcpSocket;

namespace dlion::protocol {

// One authenticated control connection over TCP, for either side.
//
// States: Handshaking -> Ready -> Closed. The agent side speaks first
// (Hello with a nonce); see handshake.h. `ready()` fires once both sides have
// proven they hold the run secret; only then are frames delivered through
// `frameReceived()`. Any protocol violation, a failed proof or a handshake
// that does not finish within the timeout closes the socket and emits
// `failed()` with the reason, then `closed()`.
class FramedConnection : public QObject {
    Q_OBJECT
public:
    enum class Role { Agent, Controller };
    enum class State { Handshaking, Ready, Closed };

    // Takes ownership of a connected socket.
    FramedConnection(QTcpSocket *socket, Role role, QByteArray secret, QObject *parent = nullptr);
    ~FramedConnection() override;

    void start(int handshakeTimeoutMs = 10000);
    bool send(MessageType type, const QCborMap &body = {});
    void close();

    State state() const { return m_state; }
    QString peerName() const;

Q_SIGNALS:
    void ready();
    void frameReceived(const dlion::protocol::Frame &frame);
    // Another frame of a split message arrived: the peer is alive while a
    // large message (a final model) crosses a slow link.
    void receiving(qint64 bytesSoFar);
    void failed(const QString &reason);
    void closed();

private:
    void onReadyRead();
    void handleHandshake(const Frame &frame);
    void fail(const QString &reason);

    QPointer<QTcpSocket> m_socket;
    Role m_role;
    QByteArray m_secret;
    FrameCodec m_codec;
    State m_state = State::Handshaking;
    QByteArray m_agentNonce;
    QByteArray m_controllerNonce;
    QTimer m_handshakeTimer;
};

} // namespace dlion::protocol
