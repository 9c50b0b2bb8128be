#include <frame_codec.h>
#include <handshake.h>
#include <job_spec.h>
#include <telemetry.h>

#include <QJsonArray>
#include <QRandomGenerator>
#include <QtEndian>
#include <QtTest>

using namespace dlion::protocol;

class TestFrameCodec : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void roundTripWithKeyAndSplitDelivery();
    void rejectsWrongKey();
    void rejectsCorruptedByte();
    void rejectsOversizedFrameFromHeaderAlone();
    void rejectsBadMagicVersionAndType();
    void rejectsReplayedFrame();
    void randomBytesNeverCrash();
    void handshakeProofs();
    void telemetryRoundTrip();
};

void TestFrameCodec::roundTripWithKeyAndSplitDelivery()
{
    FrameCodec tx, rx;
    tx.setKey("k");
    rx.setKey("k");
    QByteArray wire;
    for (int i = 0; i < 3; ++i)
        wire += tx.encode(Frame{MessageType::Command, QCborMap{{"cmd", "stop"}, {"i", i}}});
    // Byte-at-a-time delivery must give the same frames.
    QList<Frame> got;
    for (char c : wire) {
        QVERIFY(rx.feed(QByteArray(1, c)));
        while (auto f = rx.next())
            got.append(*f);
    }
    QCOMPARE(got.size(), 3);
    for (int i = 0; i < 3; ++i) {
        QCOMPARE(got[i].type, MessageType::Command);
        QCOMPARE(got[i].body.value("i").toInteger(), i);
    }
    QVERIFY(!rx.hasError());
}

void TestFrameCodec::rejectsWrongKey()
{
    FrameCodec tx, rx;
    tx.setKey("secret-a");
    rx.setKey("secret-b");
    rx.feed(tx.encode(Frame{MessageType::Job, {}}));
    QVERIFY(!rx.next());
    QVERIFY(rx.hasError());
    QVERIFY(rx.errorString().contains("authentication"));
}

void TestFrameCodec::rejectsCorruptedByte()
{
    FrameCodec tx, rx;
    QByteArray wire = tx.encode(Frame{MessageType::Telemetry, QCborMap{{"x", 1.5}}});
    wire[FrameCodec::kHeaderSize + 1] = char(wire[FrameCodec::kHeaderSize + 1] ^ 0x40);
    rx.feed(wire);
    QVERIFY(!rx.next());
    QVERIFY(rx.hasError());
    // A poisoned decoder stays poisoned.
    QVERIFY(!rx.feed(FrameCodec().encode(Frame{MessageType::Heartbeat, {}})));
}

void TestFrameCodec::rejectsOversizedFrameFromHeaderAlone()
{
    FrameCodec tx, rx(1024);
    QByteArray wire = tx.encode(Frame{MessageType::Telemetry, QCborMap{{"blob", QByteArray(4096, 'x')}}});
    QVERIFY(!rx.feed(wire.left(FrameCodec::kHeaderSize)));
    QVERIFY(rx.errorString().contains("exceeds"));
}

void TestFrameCodec::rejectsBadMagicVersionAndType()
{
    const QByteArray good = FrameCodec().encode(Frame{MessageType::Heartbeat, {}});
    QByteArray magic = good, version = good, type = good;
    magic[0] = 'X';
    version[4] = char(99);
    qToBigEndian<quint16>(999, type.data() + 6);
    const QList<QPair<QByteArray, QString>> cases = {{magic, "magic"}, {version, "version"}, {type, "type"}};
    for (const auto &[bytes, word] : cases) {
        FrameCodec rx;
        QVERIFY(!rx.feed(bytes));
        QVERIFY2(rx.errorString().contains(word), qPrintable(rx.errorString()));
    }
}

void TestFrameCodec::rejectsReplayedFrame()
{
    FrameCodec tx, rx;
    const QByteArray first = tx.encode(Frame{MessageType::Command, QCborMap{{"cmd", "pause"}}});
    rx.feed(first);
    QVERIFY(rx.next());
    rx.feed(first);  // the same authentic frame again
    QVERIFY(!rx.next());
    QVERIFY(rx.errorString().contains("sequence"));
}

void TestFrameCodec::randomBytesNeverCrash()
{
    QRandomGenerator rng(42);
    const QByteArray valid = FrameCodec().encode(Frame{MessageType::Status, QCborMap{{"state", "running"}}});
    int rejected = 0;
    for (int i = 0; i < 5000; ++i) {
        QByteArray bytes = valid;
        // Mutate a valid frame (deep paths) or send pure noise (shallow paths).
        if (i % 2 == 0) {
            for (int k = 0; k < 1 + int(rng.bounded(4)); ++k)
                bytes[int(rng.bounded(bytes.size()))] = char(rng.bounded(256));
        } else {
            bytes = QByteArray(int(rng.bounded(64)), Qt::Uninitialized);
            for (char &c : bytes)
                c = char(rng.bounded(256));
        }
        FrameCodec rx(4096);
        rx.feed(bytes);
        while (rx.next()) {
        }
        rejected += rx.hasError() ? 1 : 0;
    }
    QVERIFY(rejected > 2500);
}

void TestFrameCodec::handshakeProofs()
{
    using namespace handshake;
    const QByteArray secret = makeSecret(), a = makeNonce(), c = makeNonce();
    QCOMPARE(a.size(), kNonceSize);
    QVERIFY(a != c);
    QVERIFY(equal(controllerProof(secret, a, c), controllerProof(secret, a, c)));
    QVERIFY(!equal(controllerProof(secret, a, c), controllerProof("other", a, c)));
    // Role separation: an agent proof never passes as a controller proof.
    QVERIFY(!equal(controllerProof(secret, a, c), agentProof(secret, a, c)));
    QVERIFY(!equal(sessionKey(secret, a, c), sessionKey(secret, c, a)));
}

void TestFrameCodec::telemetryRoundTrip()
{
    TelemetryBatch in;
    in.seq = 42;
    RoundRecord r;
    r.worker = 2;
    r.round = 77;
    r.rate = 1234.5;
    r.paramDigest = 0xfedcba9876543210ull;
    r.linkMbps = {0, 40, 10};
    r.linkBytes = {0, 4096, 512};
    r.linkFraction = {0, 1, 0.25};
    in.rounds.append(r);
    EvalRecord e;
    e.worker = 1;
    e.globalAccuracy = 0.81;
    e.final = true;
    e.primary = true;  // worker 1 speaks for a group that lost worker 0
    in.evals.append(e);
    MergeEvent m;
    m.from = 0;
    m.to = 3;
    m.alpha = 0.5;
    m.manual = true;
    in.merges.append(m);

    FrameCodec tx, rx;
    rx.feed(tx.encode(Frame{MessageType::Telemetry, toCbor(in)}));
    auto f = rx.next();
    QVERIFY(f);
    TelemetryBatch out;
    QVERIFY(fromCbor(f->body, &out));
    QCOMPARE(out.seq, 42);
    QCOMPARE(out.rounds.size(), 1);
    QCOMPARE(out.rounds[0].round, 77);
    QCOMPARE(out.rounds[0].paramDigest, r.paramDigest);
    QCOMPARE(out.rounds[0].linkFraction, r.linkFraction);
    QCOMPARE(out.rounds[0].linkBytes, r.linkBytes);
    QCOMPARE(out.evals[0].globalAccuracy, 0.81);
    QVERIFY(out.evals[0].final);
    QVERIFY(out.evals[0].primary);
    QCOMPARE(out.merges[0].to, 3);
    QVERIFY(out.merges[0].manual);
    // Wrong shapes are refused rather than half-read.
    TelemetryBatch bad;
    QVERIFY(!fromCbor(QCborMap{{"rounds", 5}}, &bad));
    QVERIFY(!fromCbor(QCborMap{{"rounds", QCborArray{QCborMap{{"bw", "x"}}}}}, &bad));
    QVERIFY(!fromCbor(QCborMap{{"seq", "7"}}, &bad));
    // An older agent's frames carry no number: unnumbered, nothing to acknowledge.
    TelemetryBatch old;
    old.seq = 9;
    QVERIFY(fromCbor(QCborMap{{"rounds", QCborArray{}}}, &old));
    QCOMPARE(old.seq, 0);
}

QTEST_GUILESS_MAIN(TestFrameCodec)
#include "tst_frame_codec.moc"
