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
    void handshakeFramesAreSmallUntilKeysAreSet();
    void largeMessageSpansFramesUpToItsBound();
    void reflectedFrameFailsItsMac();
    void rejectsBadMagicVersionAndType();
    void rejectsReplayedFrame();
    void randomBytesNeverCrash();
    void handshakeProofs();
    void telemetryRoundTrip();
    void longBacklogSplitsIntoFramesUnderTheLimit();
    void droppingOldestKeepsEvaluations();
};

namespace {

// A round record of a worker in a group of `world`, as a long run sends it.
RoundRecord roundRecord(qint64 round, int world)
{
    RoundRecord r;
    r.round = round;
    r.t = double(round) * 0.07;
    r.rate = 1000 + double(round % 97);
    r.linkBytes.assign(world, 4096.5);
    r.linkMbps.assign(world, 123.25);
    r.linkFraction.assign(world, 0.125);
    return r;
}

} // namespace

void TestFrameCodec::roundTripWithKeyAndSplitDelivery()
{
    FrameCodec tx, rx;
    tx.setKeys("k", {});
    rx.setKeys({}, "k");
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
    tx.setKeys("secret-a", {});
    rx.setKeys({}, "secret-b");
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

void TestFrameCodec::handshakeFramesAreSmallUntilKeysAreSet()
{
    FrameCodec tx;
    tx.setKeys("k", {});
    const QByteArray big = tx.encode(Frame{MessageType::Auth, QCborMap{{"blob", QByteArray(5000, 'x')}}});
    // Before the handshake, a header declaring 5000 bytes is refused with
    // the part of the body that came along.
    FrameCodec before;
    QVERIFY(!before.feed(big.left(FrameCodec::kHeaderSize + 1000)));
    QVERIFY2(before.errorString().contains("4096-byte limit"), qPrintable(before.errorString()));
    // The real handshake frames fit.
    FrameCodec agent, controller;
    const QByteArray hello = agent.encode(Frame{MessageType::Hello, QCborMap{{"version", kProtocolVersion},
                                                                            {"nonce", handshake::makeNonce()},
                                                                            {"agent", "dlion-agent"},
                                                                            {"agent_version", "1.2.3-long-git-describe-g0123456789ab"}}});
    QVERIFY(controller.feed(hello));
    QVERIFY(controller.next());
    // Once keys are set, the normal limit applies.
    FrameCodec after;
    after.setKeys({}, "k");
    QVERIFY(after.feed(big));
    QVERIFY(after.next());
}

void TestFrameCodec::largeMessageSpansFramesUpToItsBound()
{
    FrameCodec tx, rx;
    tx.setKeys("k", {});
    rx.setKeys({}, "k");
    QByteArray blob(3 * FrameCodec::kFragmentBody + 123, Qt::Uninitialized);
    for (qsizetype i = 0; i < blob.size(); ++i)
        blob[i] = char(i * 7 + i / 4096);
    const QByteArray big = tx.encode(Frame{MessageType::Finished, QCborMap{{"model", blob}}});
    // Four frames, each under the frame limit, all but the last flagged.
    QList<quint8> flags;
    for (qsizetype at = 0; at < big.size();) {
        const quint32 length = qFromBigEndian<quint32>(big.constData() + at + 12);
        QVERIFY(length <= FrameCodec::kFragmentBody);
        flags << quint8(big[at + 5]);
        at += FrameCodec::kHeaderSize + length + FrameCodec::kMacSize;
    }
    QCOMPARE(flags, (QList<quint8>{FrameCodec::kMoreFlag, FrameCodec::kMoreFlag, FrameCodec::kMoreFlag, 0}));
    const QByteArray wire = big + tx.encode(Frame{MessageType::Heartbeat, {}});
    QList<Frame> got;
    qint64 partialSeen = 0;
    for (qsizetype at = 0; at < wire.size(); at += 256 * 1024) {
        QVERIFY(rx.feed(wire.mid(at, 256 * 1024)));
        while (auto f = rx.next())
            got.append(*f);
        partialSeen = std::max(partialSeen, rx.partialMessageBytes());
    }
    QVERIFY(!rx.hasError());
    QCOMPARE(got.size(), 2);
    QCOMPARE(got[0].type, MessageType::Finished);
    QVERIFY(got[0].body.value("model").toByteArray() == blob);
    QCOMPARE(got[1].type, MessageType::Heartbeat);
    QVERIFY(partialSeen >= 2 * qint64(FrameCodec::kFragmentBody));  // the third frame came with the last
    QCOMPARE(rx.partialMessageBytes(), 0);

    // A receiver bounding messages at 2 MiB refuses the frame that crosses it.
    FrameCodec bounded(FrameCodec::kDefaultMaxBody, 2 << 20);
    bounded.setKeys({}, "k");
    FrameCodec tx2;
    tx2.setKeys("k", {});
    QVERIFY(bounded.feed(tx2.encode(Frame{MessageType::Finished, QCborMap{{"model", blob}}})));
    QVERIFY(!bounded.next());
    QVERIFY2(bounded.errorString().contains("exceeds the limit"), qPrintable(bounded.errorString()));
    // Another type inside a split message is refused.
    FrameCodec mixed;
    mixed.setKeys({}, "k");
    FrameCodec tx3;
    tx3.setKeys("k", {});
    const QByteArray split = tx3.encode(Frame{MessageType::Finished, QCborMap{{"model", blob}}});
    const qsizetype first = FrameCodec::kHeaderSize + FrameCodec::kFragmentBody + FrameCodec::kMacSize;
    QVERIFY(mixed.feed(split.left(first)));
    QVERIFY(!mixed.next());
    QVERIFY(!mixed.feed(tx3.encode(Frame{MessageType::Heartbeat, {}})));
    QVERIFY2(mixed.errorString().contains("heartbeat frame inside a split finished message"), qPrintable(mixed.errorString()));
    // Before the handshake ends no message may be split.
    FrameCodec plainTx, before;
    QByteArray flagged = plainTx.encode(Frame{MessageType::Hello, {}});
    flagged[5] = char(FrameCodec::kMoreFlag);
    QVERIFY(!before.feed(flagged));
    QVERIFY2(before.errorString().contains("flags 1 are not allowed"), qPrintable(before.errorString()));
}

void TestFrameCodec::reflectedFrameFailsItsMac()
{
    using namespace handshake;
    const QByteArray secret = makeSecret(), a = makeNonce(), c = makeNonce();
    FrameCodec agent, controller, controllerEcho;
    agent.setKeys(agentToControllerKey(secret, a, c), controllerToAgentKey(secret, a, c));
    controller.setKeys(controllerToAgentKey(secret, a, c), agentToControllerKey(secret, a, c));
    controllerEcho.setKeys(controllerToAgentKey(secret, a, c), agentToControllerKey(secret, a, c));
    const QByteArray command = controller.encode(Frame{MessageType::Command, QCborMap{{"cmd", "pause"}}});
    QVERIFY(agent.feed(command));
    QVERIFY(agent.next());
    // The same bytes sent back to the controller, at the sequence it expects.
    QVERIFY(controllerEcho.feed(command));
    QVERIFY(!controllerEcho.next());
    QVERIFY2(controllerEcho.errorString().contains("authentication"), qPrintable(controllerEcho.errorString()));
    // And an agent frame sent back to the agent.
    FrameCodec agentEcho;
    agentEcho.setKeys(agentToControllerKey(secret, a, c), controllerToAgentKey(secret, a, c));
    QVERIFY(agentEcho.feed(agent.encode(Frame{MessageType::Status, QCborMap{{"state", "running"}}})));
    QVERIFY(!agentEcho.next());
    QVERIFY(agentEcho.errorString().contains("authentication"));
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
    QVERIFY(!equal(agentToControllerKey(secret, a, c), agentToControllerKey(secret, c, a)));
    QVERIFY(!equal(agentToControllerKey(secret, a, c), controllerToAgentKey(secret, a, c)));
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
    in.data.append(DataSummary{1, "csv", "/srv/a", 90, 12, {40, 0, 50}});

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
    QCOMPARE(out.data.size(), 1);
    QCOMPARE(out.data[0].dataDir, QString("/srv/a"));
    QCOMPARE(out.data[0].testSamples, 12);
    QCOMPARE(out.data[0].histogram, (QList<qint64>{40, 0, 50}));
    QCOMPARE(dataSummaryFromJson(toJson(out.data[0]))->histogram, (QList<qint64>{40, 0, 50}));
    // Wrong shapes are refused rather than half-read.
    TelemetryBatch bad;
    QVERIFY(!fromCbor(QCborMap{{"rounds", 5}}, &bad));
    QVERIFY(!fromCbor(QCborMap{{"rounds", QCborArray{QCborMap{{"bw", "x"}}}}}, &bad));
    QVERIFY(!fromCbor(QCborMap{{"seq", "7"}}, &bad));
    QVERIFY(!fromCbor(QCborMap{{"data", QCborArray{QCborMap{{"h", QCborArray{"x"}}}}}}, &bad));
    // An older agent's frames carry no number: unnumbered, nothing to acknowledge.
    TelemetryBatch old;
    old.seq = 9;
    QVERIFY(fromCbor(QCborMap{{"rounds", QCborArray{}}}, &old));
    QCOMPARE(old.seq, 0);
}

void TestFrameCodec::longBacklogSplitsIntoFramesUnderTheLimit()
{
    // Two hours of a worker at ~14 rounds/s, capped as an agent caps its
    // backlog: as one frame it would exceed the controller's limit.
    constexpr qsizetype kRecords = 100000;
    constexpr qsizetype kMaxBytes = 1 << 20;
    TelemetryBatch backlog;
    for (qint64 i = 0; i < kRecords; ++i)
        backlog.rounds.append(roundRecord(i, 2));
    backlog.evals.append(EvalRecord{});
    backlog.merges.append(MergeEvent{});
    const qsizetype whole = toCbor(backlog).toCborValue().toCbor().size();
    QVERIFY2(whole > qsizetype(FrameCodec::kDefaultMaxBody), qPrintable(QString::number(whole)));

    const QList<TelemetryBatch> parts = split(backlog, kMaxBytes);
    QVERIFY(parts.size() > whole / kMaxBytes);
    qint64 nextRound = 0;
    qsizetype evals = 0, merges = 0;
    for (const TelemetryBatch &part : parts) {
        QVERIFY(!part.isEmpty());
        QVERIFY(toCbor(part).toCborValue().toCbor().size() <= kMaxBytes);
        for (const RoundRecord &r : part.rounds)
            QCOMPARE(r.round, nextRound++);
        evals += part.evals.size();
        merges += part.merges.size();
    }
    QCOMPARE(nextRound, kRecords);
    QCOMPARE(evals, 1);
    QCOMPARE(merges, 1);

    // A record larger than the budget travels alone, between the others.
    TelemetryBatch wide;
    wide.rounds = {roundRecord(0, 1), roundRecord(1, 4096), roundRecord(2, 1)};
    const QList<TelemetryBatch> wideParts = split(wide, 4096);
    QCOMPARE(wideParts.size(), 3);
    QCOMPARE(wideParts[1].rounds.size(), 1);
    QCOMPARE(wideParts[1].rounds[0].round, 1);
}

void TestFrameCodec::droppingOldestKeepsEvaluations()
{
    TelemetryBatch batch;
    for (qint64 i = 0; i < 10; ++i)
        batch.rounds.append(roundRecord(i, 1));
    batch.evals = {EvalRecord{}, EvalRecord{}};
    batch.merges = {MergeEvent{}};
    dropOldest(batch, 4);
    QCOMPARE(batch.rounds.size(), 6);
    QCOMPARE(batch.rounds.first().round, 4);
    QCOMPARE(batch.evals.size(), 2);
    dropOldest(batch, 7);
    QVERIFY(batch.rounds.isEmpty());
    QCOMPARE(batch.evals.size(), 1);
    QCOMPARE(batch.merges.size(), 1);
}

QTEST_GUILESS_MAIN(TestFrameCodec)
#include "tst_frame_codec.moc"
