// The control plane against a real dlion-agent over real sockets: wrong
// secrets, replayed handshakes and frames, oversized and malformed frames,
// and a bounded fuzz loop. The agent must drop bad peers, log why, and keep
// serving the right controller.
#include "child_processes.h"

#include <agent_connection.h>
#include <frame_codec.h>
#include <handshake.h>

#include <QCborArray>
#include <QMessageAuthenticationCode>
#include <QProcess>
#include <QRandomGenerator>
#include <QSignalSpy>
#include <QTcpSocket>
#include <QTemporaryDir>
#include <QtEndian>
#include <QtTest>

using namespace dlion;
using protocol::Frame;
using protocol::FrameCodec;
using protocol::MessageType;

namespace {

// A hand-driven controller: sends exactly the bytes a test wants.
struct RawPeer {
    QTcpSocket socket;
    FrameCodec codec;
    QByteArray agentNonce;
    QByteArray controllerNonce;

    // Connects and reads the agent's Hello.
    bool open(quint16 port)
    {
        socket.connectToHost(QHostAddress::LocalHost, port);
        if (!socket.waitForConnected(5000))
            return false;
        const std::optional<Frame> hello = read();
        if (!hello || hello->type != MessageType::Hello)
            return false;
        agentNonce = hello->body.value("nonce").toByteArray();
        return true;
    }

    std::optional<Frame> read(int timeoutMs = 5000)
    {
        QElapsedTimer clock;
        clock.start();
        for (;;) {
            if (std::optional<Frame> f = codec.next())
                return f;
            if (codec.hasError() || clock.elapsed() > timeoutMs || socket.state() != QAbstractSocket::ConnectedState)
                return std::nullopt;
            if (socket.waitForReadyRead(50))
                codec.feed(socket.readAll());
        }
    }

    QByteArray authFrame(const QByteArray &secret)
    {
        controllerNonce = protocol::handshake::makeNonce();
        return codec.encode(Frame{MessageType::Auth,
                                  QCborMap{{"nonce", controllerNonce},
                                           {"proof", protocol::handshake::controllerProof(secret, agentNonce, controllerNonce)}}});
    }

    // Completes the handshake; afterwards frames carry the session key.
    bool authenticate(const QByteArray &secret)
    {
        send(authFrame(secret));
        const std::optional<Frame> ok = read();
        if (!ok || ok->type != MessageType::AuthOk)
            return false;
        useSessionKeys(secret);
        return true;
    }

    void useSessionKeys(const QByteArray &secret)
    {
        using namespace protocol::handshake;
        codec.setKeys(controllerToAgentKey(secret, agentNonce, controllerNonce),
                      agentToControllerKey(secret, agentNonce, controllerNonce));
    }

    void send(const QByteArray &bytes)
    {
        socket.write(bytes);
        socket.flush();
    }

    // True once the agent has closed the connection.
    bool droppedWithin(int ms)
    {
        QElapsedTimer clock;
        clock.start();
        while (socket.state() == QAbstractSocket::ConnectedState && clock.elapsed() < ms)
            socket.waitForDisconnected(50);
        return socket.state() != QAbstractSocket::ConnectedState;
    }
};

// A frame header with the given fields and a correct MAC for an empty key.
QByteArray rawFrame(quint8 version, quint16 type, quint32 seq, quint32 declaredLength, const QByteArray &body)
{
    QByteArray out(FrameCodec::kHeaderSize, Qt::Uninitialized);
    memcpy(out.data(), "DLNF", 4);
    out[4] = char(version);
    out[5] = 0;
    qToBigEndian<quint16>(type, out.data() + 6);
    qToBigEndian<quint32>(seq, out.data() + 8);
    qToBigEndian<quint32>(declaredLength, out.data() + 12);
    out += body;
    return out + QMessageAuthenticationCode::hash(out, QByteArray(), QCryptographicHash::Sha256).left(FrameCodec::kMacSize);
}

QByteArray randomBytes(QRandomGenerator &rng, int n)
{
    QByteArray b(n, Qt::Uninitialized);
    for (char &c : b)
        c = char(rng.bounded(256));
    return b;
}

QCborValue randomValue(QRandomGenerator &rng, int depth)
{
    switch (rng.bounded(depth > 0 ? 9 : 7)) {
    case 0: return qint64(rng.generate64());
    case 1: return rng.generateDouble() * 1e6 - 5e5;
    case 2: return std::numeric_limits<double>::quiet_NaN();
    case 3: return QString::fromLatin1(randomBytes(rng, int(rng.bounded(20))).toHex());
    case 4: return randomBytes(rng, int(rng.bounded(40)));
    case 5: return bool(rng.bounded(2));
    case 6: return QCborValue();
    case 7: {
        QCborArray a;
        for (int i = int(rng.bounded(5)); i > 0; --i)
            a.append(randomValue(rng, depth - 1));
        return a;
    }
    default: {
        QCborMap m;
        for (int i = int(rng.bounded(5)); i > 0; --i)
            m.insert(QString::number(rng.bounded(100)), randomValue(rng, depth - 1));
        return m;
    }
    }
}

// An authenticated-looking body: real field names with random values.
QCborMap randomBody(QRandomGenerator &rng, MessageType type)
{
    static const QStringList kKeys = {"strategy", "model", "dataset", "batch_size", "lr", "budget", "slowdown",
                                      "rank", "world", "emulation", "cmd", "value", "rounds", "evals", "state", "seq"};
    QCborMap body;
    for (int i = int(rng.bounded(6)); i > 0; --i)
        body.insert(kKeys[int(rng.bounded(kKeys.size()))], randomValue(rng, 2));
    if (type == MessageType::Job)
        body.insert(QStringLiteral("fuzz"), 1);  // never a valid job: nothing may start training
    if (type == MessageType::Command && body.value("cmd").toString() == QLatin1String("shutdown"))
        body.remove(QStringLiteral("cmd"));
    return body;
}

} // namespace

class TestControlPlane : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void init();
    void cleanup();
    void wrongSecretIsRejectedAndLogged();
    void replayedAuthAndFramesAreRejected();
    void oversizedAndForeignFramesAreDroppedAtOnce();
    void fuzzedFramesNeverCrashTheAgent();
    void telemetryAcksNeedNoRunningJob();

private:
    bool rightControllerIsServed();
    QByteArray agentLog() const;

    QTemporaryDir m_dir;
    QByteArray m_secret;
    QProcess m_agent;
    quint16 m_port = 0;
};

void TestControlPlane::init()
{
    m_secret = protocol::handshake::makeSecret();
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert("DLION_SECRET", QString::fromLatin1(m_secret));
    m_agent.setProcessEnvironment(env);
    m_agent.setStandardErrorFile(m_dir.filePath("agent.log"));  // a file: thousands of warnings never block it
    m_agent.start(qEnvironmentVariable("DLION_AGENT"), {"--listen", "127.0.0.1:0", "--grace", "0", "--exit-with-parent"});
    test::readAgentPort(m_agent, &m_port);
}

void TestControlPlane::cleanup()
{
    m_agent.kill();
    m_agent.waitForFinished(5000);
}

QByteArray TestControlPlane::agentLog() const
{
    QFile f(m_dir.filePath("agent.log"));
    return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

bool TestControlPlane::rightControllerIsServed()
{
    core::AgentConnection conn(0, QStringLiteral("127.0.0.1"), m_port, m_secret);
    QSignalSpy ready(&conn, &core::AgentConnection::ready);
    QSignalSpy heartbeat(&conn, &core::AgentConnection::heartbeat);
    conn.open(5000);
    return ready.wait(10000) && heartbeat.wait(5000) && m_agent.state() == QProcess::Running;
}

void TestControlPlane::wrongSecretIsRejectedAndLogged()
{
    core::AgentConnection intruder(0, QStringLiteral("127.0.0.1"), m_port, protocol::handshake::makeSecret());
    QSignalSpy lost(&intruder, &core::AgentConnection::lost);
    QSignalSpy ready(&intruder, &core::AgentConnection::ready);
    intruder.open(5000);
    QVERIFY(lost.wait(10000));
    QCOMPARE(ready.count(), 0);
    QTRY_VERIFY_WITH_TIMEOUT(agentLog().contains("failed authentication (wrong run secret)"), 5000);
    QVERIFY(rightControllerIsServed());
}

void TestControlPlane::replayedAuthAndFramesAreRejected()
{
    // A real session, recorded.
    RawPeer first;
    QVERIFY(first.open(m_port));
    const QByteArray recordedAuth = first.authFrame(m_secret);
    first.send(recordedAuth);
    const std::optional<Frame> authOk = first.read();
    QVERIFY(authOk && authOk->type == MessageType::AuthOk);
    first.useSessionKeys(m_secret);
    const QByteArray command = first.codec.encode(Frame{MessageType::Command, QCborMap{{"cmd", "merge_now"}}});
    first.send(command);
    QVERIFY(first.read().has_value());  // answered (no job is running)
    // The same authenticated frame again: a replay inside the session.
    first.send(command);
    QVERIFY(first.droppedWithin(5000));

    // The recorded Auth on a new connection: the agent's nonce is new, the proof is stale.
    RawPeer second;
    QVERIFY(second.open(m_port));
    QVERIFY(second.agentNonce != first.agentNonce);
    second.send(recordedAuth);
    QVERIFY(second.droppedWithin(5000));
    QVERIFY(!second.read(100).has_value());
    QTRY_VERIFY_WITH_TIMEOUT(agentLog().contains("failed authentication"), 5000);
    QVERIFY(rightControllerIsServed());
}

void TestControlPlane::oversizedAndForeignFramesAreDroppedAtOnce()
{
    const QByteArray body = QCborMap{{"nonce", QByteArray(32, 'x')}}.toCborValue().toCbor();
    const QList<QPair<const char *, QByteArray>> cases = {
        {"claims 4 GB", rawFrame(protocol::kProtocolVersion, quint16(MessageType::Auth), 0, 0xFFFFFFF0u, {})},
        {"wrong version", rawFrame(protocol::kProtocolVersion + 1, quint16(MessageType::Auth), 0, quint32(body.size()), body)},
        {"unknown type", rawFrame(protocol::kProtocolVersion, 999, 0, quint32(body.size()), body)},
        {"not a frame", QByteArray("GET / HTTP/1.1\r\nHost: x\r\n\r\n")},
    };
    for (const auto &[name, bytes] : cases) {
        RawPeer peer;
        QVERIFY(peer.open(m_port));
        peer.send(bytes);
        QVERIFY2(peer.droppedWithin(3000), name);  // without waiting for any body
    }
    QVERIFY(rightControllerIsServed());
}

void TestControlPlane::fuzzedFramesNeverCrashTheAgent()
{
    constexpr int kCases = 3000;
    const quint32 seed = QRandomGenerator::global()->generate();
    qInfo() << "fuzz seed" << seed;
    QRandomGenerator rng(seed);
    const QList<MessageType> types = {MessageType::Hello, MessageType::Auth, MessageType::AuthOk, MessageType::Job,
                                      MessageType::Command, MessageType::Status, MessageType::Telemetry,
                                      MessageType::Finished, MessageType::Error, MessageType::Heartbeat};
    int authenticated = 0;
    for (int i = 0; i < kCases; ++i) {
        RawPeer peer;
        QVERIFY2(peer.open(m_port), qPrintable(QString("case %1 (seed %2): the agent stopped answering").arg(i).arg(seed)));
        const MessageType type = types[int(rng.bounded(types.size()))];
        switch (rng.bounded(6)) {
        case 0:  // noise
            peer.send(randomBytes(rng, 1 + int(rng.bounded(512))));
            break;
        case 1: {  // a valid Auth with one byte flipped
            QByteArray auth = peer.authFrame(m_secret);
            auth[int(rng.bounded(auth.size()))] ^= char(1 + rng.bounded(255));
            peer.send(auth);
            break;
        }
        case 2: {  // a valid Auth cut short
            const QByteArray auth = peer.authFrame(m_secret);
            peer.send(auth.left(int(rng.bounded(auth.size()))));
            break;
        }
        case 3: {  // a well-formed frame of any type with a random body or length
            const QByteArray body = rng.bounded(2) ? randomValue(rng, 3).toCbor() : randomBytes(rng, int(rng.bounded(64)));
            const quint32 length = rng.bounded(4) ? quint32(body.size()) : rng.generate();
            peer.send(rawFrame(protocol::kProtocolVersion, quint16(type), rng.bounded(3), length, body));
            break;
        }
        default:  // authenticated, then frames with random content
            if (!peer.authenticate(m_secret))
                QFAIL(qPrintable(QString("case %1 (seed %2): the right secret was refused").arg(i).arg(seed)));
            ++authenticated;
            for (int k = int(rng.bounded(4)); k >= 0; --k)
                peer.send(peer.codec.encode(Frame{type, randomBody(rng, type)}));
            break;
        }
        peer.socket.abort();
        if (i % 500 == 499)
            QVERIFY2(m_agent.state() == QProcess::Running, qPrintable(QString("agent died by case %1 (seed %2)").arg(i).arg(seed)));
    }
    QVERIFY(authenticated > kCases / 4);
    QVERIFY(rightControllerIsServed());
}

void TestControlPlane::telemetryAcksNeedNoRunningJob()
{
    // A controller acknowledges telemetry after its last commit, when the
    // job may be over; with or without a usable seq that is no error. An
    // unknown command after them is, so its error is the first one.
    RawPeer peer;
    QVERIFY(peer.open(m_port));
    QVERIFY(peer.authenticate(m_secret));
    for (const QCborMap &ack : {QCborMap{{"cmd", "ack"}, {"seq", 5}}, QCborMap{{"cmd", "ack"}},
                                QCborMap{{"cmd", "ack"}, {"seq", "five"}}})
        peer.send(peer.codec.encode(Frame{MessageType::Command, ack}));
    peer.send(peer.codec.encode(Frame{MessageType::Command, QCborMap{{"cmd", "bogus"}}}));
    std::optional<Frame> f;
    for (int i = 0; i < 20 && (!f || f->type != MessageType::Error); ++i)
        f = peer.read();
    QVERIFY(f && f->type == MessageType::Error);
    QVERIFY2(f->body.value("message").toString().contains("bogus"), qPrintable(f->body.value("message").toString()));
}

QTEST_GUILESS_MAIN(TestControlPlane)
#include "tst_control_plane.moc"
