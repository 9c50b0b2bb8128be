#include "frame_codec.h"

#include "handshake.h"

#include <QCborValue>
#include <QMessageAuthenticationCode>
#include <QtEndian>

#include <algorithm>

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

FrameCodec::FrameCodec(quint32 maxBody) : m_maxBody(maxBody) {}

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
    QByteArray out(kHeaderSize, Qt::Uninitialized);
    char *p = out.data();
    memcpy(p, kMagic, 4);
    p[4] = char(kProtocolVersion);
    p[5] = 0;
    qToBigEndian<quint16>(quint16(frame.type), p + 6);
    qToBigEndian<quint32>(m_sendSeq++, p + 8);
    qToBigEndian<quint32>(quint32(body.size()), p + 12);
    out += body;
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
    const std::optional<quint32> length = checkHeader();
    if (!length)
        return std::nullopt;
    const qsizetype total = kHeaderSize + qsizetype(*length) + kMacSize;
    if (m_buffer.size() < total)
        return std::nullopt;
    const QByteArray signedPart = m_buffer.left(kHeaderSize + *length);
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
    QCborParserError perr;
    const QCborValue body = QCborValue::fromCbor(signedPart.mid(kHeaderSize), &perr);
    if (perr.error != QCborError::NoError || !body.isMap()) {
        fail(QStringLiteral("frame body is not a CBOR map"));
        return std::nullopt;
    }
    ++m_recvSeq;
    m_buffer.remove(0, total);
    return Frame{MessageType(type), body.toMap()};
}

} // namespace dlion::protocol
