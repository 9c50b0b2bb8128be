// Agents in their own network namespaces, linked by tc-shaped veth pairs at
// the heterogeneous-WAN preset (40/20/10 Mbit/s): the testbed carries those
// rates, a run trains across it, and the DLion bandwidth estimator's
// per-link estimates land within 25% of the tc rates; when tc slows a link
// 200-fold mid-run, DLion sends next to nothing on it and trains on.
#include "netns_agents.h"
#include "common/median.h"

#include <QElapsedTimer>

#include <algorithm>
#include <functional>
#include <list>

using namespace dlion;

namespace {

constexpr int kNodes = test::kWanNodes;
const auto rateMbps = test::wanHeteroMbps;

using test::median;

const char *kSink = R"(
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1); print('ready', flush=True)
c, _ = s.accept(); n = 0; t0 = None
while True:
    d = c.recv(1 << 16)
    if not d: break
    t0 = t0 or time.time(); n += len(d)
print(n * 8 / (time.time() - t0) / 1e6, flush=True)
)";

const char *kSource = R"(
import socket, sys, time
s = socket.create_connection((sys.argv[1], int(sys.argv[2]))); t0 = time.time(); b = b'x' * 65536
while time.time() - t0 < 2: s.sendall(b)
s.close()
)";

protocol::JobSpec dlionJob(double seconds)
{
    protocol::JobSpec job;
    job.strategy = "dlion";
    job.dataset = "synthetic";
    job.model = "lenet5";
    job.budget.seconds = seconds;
    return job;
}

} // namespace

class TestNetnsTestbed : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void initTestCase();
    void cleanupTestCase();
    void linksCarryTheirTcRates();
    void allreduceTrainsAcrossNamespaces();
    void dlionEstimatesMatchTcRates();
    void dlionTrainsOnWhenTcSlowsALinkToATrickle();

private:
    bool runJob(const protocol::JobSpec &job, core::RunSession &session, QString *message,
                const std::function<void()> &during = {}, int timeoutMs = 60000)
    {
        return m_agents.run(job, session, message, during, timeoutMs);
    }

    test::NetnsTestbed m_bed;
    test::NetnsAgents m_agents{m_bed, kNodes};
};

void TestNetnsTestbed::initTestCase()
{
    const QString why = test::NetnsTestbed::skipReason();
    if (!why.isEmpty())
        QSKIP(qPrintable(why));
    QString error;
    QVERIFY2(m_bed.up(kNodes, rateMbps, &error), qPrintable(error));
}

void TestNetnsTestbed::cleanupTestCase()
{
    m_agents.stop();
    m_bed.down();
}

void TestNetnsTestbed::linksCarryTheirTcRates()
{
    const QString python = QStringLiteral("/usr/bin/python3");
    if (!QFileInfo(python).isExecutable())
        QSKIP("needs /usr/bin/python3 (installed by installer/install-deps.sh) to measure the links");
    struct Probe {
        int from = 0, to = 0;
        std::unique_ptr<QProcess> sink = std::make_unique<QProcess>(), source = std::make_unique<QProcess>();
        ~Probe()
        {
            for (QProcess *p : {sink.get(), source.get()}) {
                p->kill();
                p->waitForFinished(2000);
            }
        }
    };
    std::list<Probe> probes;
    for (int i = 0; i < kNodes; ++i) {
        for (int j = i + 1; j < kNodes; ++j) {
            probes.emplace_back();
            probes.back().from = i;
            probes.back().to = j;
        }
    }
    // All links at once: each pair of nodes has its own veth pair.
    for (Probe &p : probes) {
        const QString port = QString::number(5000 + 10 * p.from + p.to);
        const QStringList args = {"-c", kSink, test::NetnsTestbed::address(p.to), port};
        p.sink->start("ip", m_bed.inNode(p.to, python, args));
        QVERIFY2(p.sink->waitForReadyRead(10000), p.sink->readAllStandardError().constData());
        QVERIFY(p.sink->readLine().startsWith("ready"));
        p.source->start("ip", m_bed.inNode(p.from, python, {"-c", kSource, test::NetnsTestbed::address(p.to), port}));
    }
    for (Probe &p : probes) {
        QVERIFY(p.source->waitForFinished(20000));
        QVERIFY(p.sink->waitForFinished(20000));
        const double measured = p.sink->readAll().trimmed().toDouble();
        const double expected = rateMbps(p.from, p.to);
        qInfo("link %d-%d: tc %.0f Mbit/s, measured %.1f Mbit/s", p.from, p.to, expected, measured);
        QVERIFY2(std::abs(measured - expected) <= 0.25 * expected,
                 qPrintable(QString("link %1-%2 carried %3 Mbit/s, tc says %4").arg(p.from).arg(p.to).arg(measured).arg(expected)));
    }
}

void TestNetnsTestbed::allreduceTrainsAcrossNamespaces()
{
    protocol::JobSpec job;
    job.dataset = "synthetic";
    job.model = "mlp";
    job.budget.maxRounds = 20;
    core::RunSession session;
    QString message;
    QVERIFY2(runJob(job, session, &message), qPrintable(message));
    for (int w = 0; w < kNodes; ++w)
        QCOMPARE(session.data().rounds(w).size(), 20);
    QVERIFY(session.data().rounds(0).last().bytesSent > 0);
}

void TestNetnsTestbed::dlionEstimatesMatchTcRates()
{
    const protocol::JobSpec job = dlionJob(12);
    core::RunSession session;
    QString message;
    const bool ok = runJob(job, session, &message);
    if (!ok && (message.contains("not available in this engine build") || message.contains("unknown strategy")))
        QSKIP(qPrintable("the engine has no dlion strategy yet (" + message + "); the estimator check waits for it"));
    QVERIFY2(ok, qPrintable(message));
    for (int i = 0; i < kNodes; ++i) {
        const auto &rounds = session.data().rounds(i);
        QVERIFY(rounds.size() > 6);
        for (int j = 0; j < kNodes; ++j) {
            if (j == i)
                continue;
            // The estimate settles: judge the median over the last third of the run.
            std::vector<double> late;
            for (qsizetype r = rounds.size() * 2 / 3; r < rounds.size(); ++r)
                if (size_t(j) < rounds[r].linkMbps.size())
                    late.push_back(rounds[r].linkMbps[size_t(j)]);
            QVERIFY2(!late.empty(), qPrintable(QString("worker %1 reported no estimate for link to %2").arg(i).arg(j)));
            std::nth_element(late.begin(), late.begin() + late.size() / 2, late.end());
            const double estimate = late[late.size() / 2], expected = rateMbps(i, j);
            qInfo("link %d->%d: tc %.0f Mbit/s, estimated %.1f Mbit/s", i, j, expected, estimate);
            QVERIFY2(std::abs(estimate - expected) <= 0.25 * expected,
                     qPrintable(QString("worker %1 estimates %2 Mbit/s to %3; tc shapes it to %4").arg(i).arg(estimate).arg(j).arg(expected)));
        }
    }
}

void TestNetnsTestbed::dlionTrainsOnWhenTcSlowsALinkToATrickle()
{
    protocol::JobSpec job = dlionJob(30);
    // A fixed round budget sizes the payloads whatever this machine's
    // compute speed. The 20 Mbit/s link carries that link's rate times the
    // budget a round, the trickle its rate times the round's length, which
    // its probes stretch; with the default budget (the slowest share's
    // compute time, 4 ms on a fast machine) rounds of 57 ms left a ratio of
    // 18. At 0.02 s the ratio is 100 x 0.02 s over the round's length.
    job.strategyOptions[QStringLiteral("round_budget_s")] = 0.02;
    core::RunSession session;
    QString message, tcError;
    double cutAt = -1;
    QElapsedTimer sinceCut;
    // After 24 s of training at the cut rate the run's last collectives
    // (the final evaluation, the replicas' average) still cross the
    // trickle, so it is given twice the usual time to end.
    const bool ok = runJob(
        job, session, &message,
        [&] {
            const core::RunData &d = session.data();
            if (!QTest::qWaitFor([&] { return d.lastRound(0) && d.lastRound(0)->t > 6; }, 60000))
                return;
            cutAt = d.lastRound(0)->t;
            m_bed.setRate(0, 1, 0.2, &tcError);  // 40 Mbit/s -> 0.2
            sinceCut.start();
        },
        120000);
    qInfo("the run ended %.1f s after the cut", sinceCut.isValid() ? sinceCut.elapsed() / 1000.0 : -1.0);
    QString restoreError;
    m_bed.setRate(0, 1, rateMbps(0, 1), &restoreError);
    QVERIFY2(tcError.isEmpty() && restoreError.isEmpty(), qPrintable(tcError + restoreError));
    QVERIFY2(cutAt > 0, "the run never reached 6 s of training");
    QVERIFY2(ok, qPrintable(message));

    // Worker 0's bytes per round to worker 1 before the cut and once the
    // estimate has seen it, against the untouched link to 2. A round's
    // record carries its end time: the round in flight at the cut drains its
    // payload at the cut rate (up to 4 s for 96 KB at 0.2 Mbit/s), and the
    // next one was sized before the receiver's measurement came back, so
    // "after" counts only rounds that began once both have ended and at
    // least 3 s after the cut. Counting the in-flight round too made the
    // mean depend on how many rounds a loaded machine fits after the cut.
    const auto &rounds = session.data().rounds(0);
    double settledAt = cutAt + 3;
    int endedAfterCut = 0;
    for (const auto &r : rounds) {
        if (r.t >= cutAt && ++endedAfterCut == 2) {
            settledAt = std::max(settledAt, r.t);
            break;
        }
    }
    double before = 0, after = 0, other = 0, estimate = 0;
    int nBefore = 0, nAfter = 0;
    for (qsizetype i = 1; i < rounds.size(); ++i) {
        const auto &r = rounds[i];
        if (r.linkBytes.size() != 3)
            continue;
        if (r.t < cutAt) {
            before += r.linkBytes[1];
            ++nBefore;
        } else if (rounds[i - 1].t > settledAt) {
            after += r.linkBytes[1];
            other += r.linkBytes[2];
            estimate += r.linkMbps.size() == 3 ? r.linkMbps[1] : 0;
            ++nAfter;
        }
    }
    QVERIFY2(nBefore > 3 && nAfter > 3, qPrintable(QStringLiteral("%1 rounds before, %2 after").arg(nBefore).arg(nAfter)));
    before /= nBefore;
    after /= nAfter;
    other /= nAfter;
    estimate /= nAfter;
    const QString means = QString::asprintf("worker 0 bytes/round to worker 1: %.0f at 40 Mbit/s, %.0f at 0.2 Mbit/s "
                                            "(estimated %.2f Mbit/s) from %.1f s (cut at %.1f s); to worker 2 at 20 "
                                            "Mbit/s: %.0f; rounds %d + %d",
                                            before, after, estimate, settledAt, cutAt, other, nBefore, nAfter);
    qInfo("%s", qPrintable(means));
    // The fixed budget (above) keeps this ratio off the machine's speed.
    QVERIFY2(after * 20 < before, qPrintable(means));
    QVERIFY2(after * 20 < other, qPrintable(means));
    // Each end's estimate of its way over the cut link stays within reach
    // of 0.2 Mbit/s. One mistimed sample once set it to 0.0005-0.0009, where
    // payloads sized for it were never measured again. While both ways are
    // jammed after the cut a payload may carry at a quarter of the rate
    // (0.059 Mbit/s measured), hence the wide band.
    for (int w : {0, 1}) {
        std::vector<double> late;
        for (const auto &r : session.data().rounds(w)) {
            if (r.t > settledAt + 3 && r.linkMbps.size() == 3)
                late.push_back(r.linkMbps[std::size_t(1 - w)]);
        }
        QVERIFY2(late.size() > 3, qPrintable(QStringLiteral("worker %1: %2 rounds after %3 s").arg(w).arg(late.size()).arg(settledAt + 3)));
        const double estimate = median(late);
        qInfo("worker %d estimates the cut link at %.3f Mbit/s", w, estimate);
        QVERIFY2(estimate > 0.01 && estimate < 0.8,
                 qPrintable(QStringLiteral("worker %1 estimates its way over the 0.2 Mbit/s link at %2 Mbit/s")
                                .arg(w)
                                .arg(estimate)));
    }
    for (int w = 0; w < kNodes; ++w)
        QVERIFY(session.data().outcome(w).value("ok").toBool());
}

QTEST_GUILESS_MAIN(TestNetnsTestbed)
#include "tst_netns_testbed.moc"
