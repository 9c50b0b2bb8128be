#pragma once

#include "message_type.h"

#include <QByteArray>
#include <QCborMap>
#include <QString>

#include <optional>

namespace dlion::protocol {

struct Frame {
    MessageType type = MessageType::Heartbeat;
    QCborMap body;
};

// Length-prefixed, authenticated frames.
//
// Layout (big endian): magic "DLNF" | version u8 | flags u8 | type u16 |
// seq u32 | length u32 | CBOR body (length bytes) | MAC (16 bytes).
// MAC = HMAC-SHA256(key, header + body) truncated to 16 bytes. Before the
// handshake completes the keys are empty (integrity only) and a frame may
// carry at most kHandshakeMaxBody bytes, so an unauthenticated peer cannot
// make us buffer or decode much; afterwards each direction has its own
// session key (see handshake.h), so a frame from anyone without the run
// secret, or one reflected back to its sender, is rejected. Sequence numbers
// count up from 0 per direction: a replayed, dropped or reordered frame is an
// error. Any error poisons the decoder: the connection must be closed.
//
// A message whose body is over kFragmentBody (a final model) is sent as
// consecutive frames of one type, each authenticated and numbered, all but
// the last flagged kMoreFlag; the receiver joins them and decodes the body
// once, up to `maxMessage` bytes. Only after the handshake: a handshake
// frame with the flag is an error.
class FrameCodec {
public:
    static constexpr int kHeaderSize = 16;
    static constexpr int kMacSize = 16;
    static constexpr quint32 kDefaultMaxBody = 8u << 20;
    // Hello, Auth and AuthOk bodies are about 100 bytes.
    static constexpr quint32 kHandshakeMaxBody = 4096;
    // Small enough that a slow link still delivers a frame every few
    // seconds (the receiver's sign of life during a long message).
    static constexpr quint32 kFragmentBody = 1u << 20;
    static constexpr qint64 kDefaultMaxMessage = qint64(1) << 30;
    static constexpr quint8 kMoreFlag = 0x01;

    // `maxBody` applies once keys are set; before that, kHandshakeMaxBody.
    // `maxMessage` bounds a message joined from several frames.
    explicit FrameCodec(quint32 maxBody = kDefaultMaxBody, qint64 maxMessage = kDefaultMaxMessage);

    // The session keys: they end the handshake's frame limit.
    void setKeys(const QByteArray &sendKey, const QByteArray &receiveKey);

    QByteArray encode(const Frame &frame);

    // Appends received bytes; returns false once the stream is invalid.
    bool feed(const QByteArray &bytes);
    // Decodes the next complete frame, if any, with the key set now (so a
    // key change takes effect exactly at the frame boundary).
    std::optional<Frame> next();
    // Bytes of a split message received so far (0 between messages).
    qint64 partialMessageBytes() const { return m_message.size(); }
    bool hasError() const { return !m_error.isEmpty(); }
    QString errorString() const { return m_error; }

private:
    quint32 maxBody() const;
    QByteArray encodeFrame(MessageType type, quint8 flags, QByteArrayView body);
    static QByteArray mac(const QByteArray &key, const QByteArray &data);
    // Body length of the buffered frame once its header is complete and valid.
    std::optional<quint32> checkHeader();
    void fail(const QString &why);

    quint32 m_maxBody;
    qint64 m_maxMessage;
    QByteArray m_sendKey;
    QByteArray m_receiveKey;
    quint32 m_sendSeq = 0;
    quint32 m_recvSeq = 0;
    QByteArray m_buffer;
    QByteArray m_message;  // the joined bodies of a split message so far
    MessageType m_messageType = MessageType::Heartbeat;
    QString m_error;
};

} // namespace dlion::protocol
