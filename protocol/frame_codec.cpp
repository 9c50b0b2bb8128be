#include "frame_codec.h"

#include "handshake.h"

#include <QCborValue>
#include <QMessageAuthenticationCode>
#include <QtEndian>

#include <algorithm>
#include <utility>

namespace dlion::protocol {

namespace {
constexpr char kMagic[4] = {'D', 'L', 'N', 'F'};
}

bool isKnownMessageType(std::uint16_t value)
{
    switch (static_cast<MessageType>(value)) {
    case MessageType::Hello:
    case MessageType::Auth:
    case MessageType::AuthOk:
    case MessageType::Job:
    case MessageType::Command:
    case MessageType::Status:
    case MessageType::Telemetry:
    case MessageType::Finished:
    case MessageType::Error:
    case MessageType::Heartbeat:
        return true;
    }
    return false;
}

const char *messageTypeName(MessageType type)
{
    switch (type) {
    case MessageType::Hello: return "hello";
    case MessageType::Auth: return "auth";
    case MessageType::AuthOk: return "auth-ok";
    case MessageType::Job: return "job";
    case MessageType::Command: return "command";
    case MessageType::Status: return "status";
    case MessageType::Telemetry: return "telemetry";
    case MessageType::Finished: return "finished";
    case MessageType::Error: return "error";
    case MessageType::Heartbeat: return "heartbeat";
    }
    return "unknown";
}

FrameCodec::FrameCodec(quint32 maxBody, qint64 maxMessage) : m_maxBody(maxBody), m_maxMessage(maxMessage) {}

void FrameCodec::setKeys(const QByteArray &sendKey, const QByteArray &receiveKey)
{
    m_sendKey = sendKey;
    m_receiveKey = receiveKey;
}

quint32 FrameCodec::maxBody() const
{
    return m_receiveKey.isEmpty() ? std::min(kHandshakeMaxBody, m_maxBody) : m_maxBody;
}

QByteArray FrameCodec::mac(const QByteArray &key, const QByteArray &data)
{
    return QMessageAuthenticationCode::hash(data, key, QCryptographicHash::Sha256).left(kMacSize);
}

QByteArray FrameCodec::encode(const Frame &frame)
{
    const QByteArray body = frame.body.toCborValue().toCbor();
    QByteArray out;
    qsizetype at = 0;
    do {
        const qsizetype n = std::min<qsizetype>(kFragmentBody, body.size() - at);
        at += n;
        out += encodeFrame(frame.type, at < body.size() ? kMoreFlag : 0, QByteArrayView(body).sliced(at - n, n));
    } while (at < body.size());
    return out;
}

QByteArray FrameCodec::encodeFrame(MessageType type, quint8 flags, QByteArrayView body)
{
    QByteArray out(kHeaderSize, Qt::Uninitialized);
    out.reserve(kHeaderSize + body.size() + kMacSize);
    char *p = out.data();
    memcpy(p, kMagic, 4);
    p[4] = char(kProtocolVersion);
    p[5] = char(flags);
    qToBigEndian<quint16>(quint16(type), p + 6);
    qToBigEndian<quint32>(m_sendSeq++, p + 8);
    qToBigEndian<quint32>(quint32(body.size()), p + 12);
    out.append(body);
    out += mac(m_sendKey, out);
    return out;
}

bool FrameCodec::feed(const QByteArray &bytes)
{
    if (hasError())
        return false;
    // Reject a bad header as soon as it arrives, before buffering the body
    // that came with it.
    const qsizetype headerPart = qBound(qsizetype(0), kHeaderSize - m_buffer.size(), bytes.size());
    m_buffer += bytes.first(headerPart);
    if (!checkHeader() && hasError())
        return false;
    m_buffer += bytes.sliced(headerPart);
    return true;
}

std::optional<quint32> FrameCodec::checkHeader()
{
    if (hasError() || m_buffer.size() < kHeaderSize)
        return std::nullopt;
    const char *p = m_buffer.constData();
    QString why;
    const quint8 flags = quint8(p[5]);
    const quint16 type = qFromBigEndian<quint16>(p + 6);
    const quint32 length = qFromBigEndian<quint32>(p + 12);
    if (memcmp(p, kMagic, 4) != 0)
        why = QStringLiteral("not a DLion frame (bad magic)");
    else if (quint8(p[4]) != kProtocolVersion)
        why = QStringLiteral("protocol version %1, expected %2: use dlion-agent and dlion from the same release")
                  .arg(quint8(p[4])).arg(kProtocolVersion);
    else if (!isKnownMessageType(type))
        why = QStringLiteral("unknown message type %1").arg(type);
    else if (length > maxBody())
        why = QStringLiteral("frame of %1 bytes exceeds the %2-byte limit").arg(length).arg(maxBody());
    else if ((flags & ~kMoreFlag) != 0 || ((flags & kMoreFlag) && m_receiveKey.isEmpty()))
        why = QStringLiteral("frame flags %1 are not allowed here").arg(flags);
    else if (!m_message.isEmpty() && type != quint16(m_messageType))
        why = QStringLiteral("a %1 frame inside a split %2 message").arg(QLatin1String(messageTypeName(MessageType(type))),
                                                                       QLatin1String(messageTypeName(m_messageType)));
    else if (m_message.size() + qint64(length) > m_maxMessage)
        why = QStringLiteral("a split message of more than %1 bytes exceeds the limit").arg(m_maxMessage);
    if (why.isEmpty())
        return length;
    fail(why);
    return std::nullopt;
}

void FrameCodec::fail(const QString &why)
{
    m_error = why;
    m_buffer.clear();
}

std::optional<Frame> FrameCodec::next()
{
    // Each pass takes one frame; a flagged one only adds to the message.
    for (;;) {
        const std::optional<quint32> length = checkHeader();
        if (!length)
            return std::nullopt;
        const qsizetype total = kHeaderSize + qsizetype(*length) + kMacSize;
        if (m_buffer.size() < total)
            return std::nullopt;
        const QByteArray signedPart = m_buffer.left(kHeaderSize + *length);
        const quint8 flags = quint8(signedPart[5]);
        const quint16 type = qFromBigEndian<quint16>(signedPart.constData() + 6);
        const quint32 seq = qFromBigEndian<quint32>(signedPart.constData() + 8);
        if (!handshake::equal(mac(m_receiveKey, signedPart), m_buffer.mid(kHeaderSize + *length, kMacSize))) {
            fail(QStringLiteral("frame failed authentication (wrong secret or corrupted data)"));
            return std::nullopt;
        }
        if (seq != m_recvSeq) {
            fail(QStringLiteral("frame sequence %1, expected %2 (replayed or lost frame)").arg(seq).arg(m_recvSeq));
            return std::nullopt;
        }
        ++m_recvSeq;
        m_messageType = MessageType(type);
        m_message.append(QByteArrayView(signedPart).sliced(kHeaderSize));
        m_buffer.remove(0, total);
        if (flags & kMoreFlag)
            continue;
        QCborParserError perr;
        const QCborValue body = QCborValue::fromCbor(std::exchange(m_message, {}), &perr);
        if (perr.error != QCborError::NoError || !body.isMap()) {
            fail(QStringLiteral("frame body is not a CBOR map"));
            return std::nullopt;
        }
        return Frame{m_messageType, body.toMap()};
    }
}

} // namespace dlion::protocol
