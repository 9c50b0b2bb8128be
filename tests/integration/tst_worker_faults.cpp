// Worker loss and rejoin on real dlion-agent processes: an agent is killed
// with SIGKILL mid-run, the survivors re-form the group and train on, and a
// restarted agent rejoins with the best worker's parameters.
#include "child_processes.h"
#include "cluster_fixture.h"
#include "common/median.h"

#include <QJsonArray>
#include <QProcess>
#include <QTcpServer>
#include <QTemporaryDir>

#include <algorithm>
#include <csignal>

#include <map>
#include <numeric>
#include <set>
#include <vector>

using namespace dlion;

namespace {

protocol::JobSpec faultJob(const QString &strategy)
{
    protocol::JobSpec job;
    job.strategy = strategy;
    job.model = "mlp";
    job.dataset = "fashion-mnist";
    job.batchSize = 32;
    job.evalIntervalS = 1.0;
    job.evalSamples = 2000;
    job.budget.seconds = 30;
    job.budget.maxRounds = 100000;
    // A lost peer surfaces within this bound even without the controller.
    job.strategyOptions = QJsonObject{{"timeout_s", 10}};
    return job;
}

double lastGlobalAccuracy(const core::RunData &d)
{
    const auto e = d.lastGlobalEval();
    return e ? e->globalAccuracy : 0;
}

// When a round handed its payloads to the links: its record's time is its
// end, which a wait on a cut link can push seconds past the sends.
double sentAt(const protocol::RoundRecord &r) { return r.t - r.commS; }

// Mean bytes per round `worker` put on its link to `peer` over the rounds
// sent at from <= t < to; *rounds gets how many there were.
double meanLinkBytes(const core::RunData &d, int worker, int peer, double from, double to, int *rounds)
{
    double bytes = 0;
    *rounds = 0;
    for (const auto &r : d.rounds(worker)) {
        if (sentAt(r) >= from && sentAt(r) < to && r.linkBytes.size() > std::size_t(peer)) {
            bytes += r.linkBytes[std::size_t(peer)];
            ++*rounds;
        }
    }
    return *rounds ? bytes / *rounds : 0;
}

double mean(const std::vector<double> &v) { return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / double(v.size()); }

using test::median;

qsizetype roundsAfter(const core::RunData &d, int worker, double t)
{
    qsizetype n = 0;
    for (const auto &r : d.rounds(worker))
        n += r.t > t ? 1 : 0;
    return n;
}

} // namespace

class TestWorkerFaults : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void survivorsRegroupAfterSigkill();
    void restartedWorkerRejoinsWithCurrentParameters();
    void lostWorkerStopsRunWhenNotElastic();
    void rendezvousOnATakenPortIsRetried();
    void cliRestartsLostWorker();
    void slowLinksCarryLessAndTrainingGoesOn();
    void cutLinksCarryNextToNothingAndTrainingGoesOn();
};

void TestWorkerFaults::survivorsRegroupAfterSigkill()
{
    test::LocalRun run;
    QVERIFY(run.start(faultJob("dlion"), 4));
    core::RunSession &s = *run.session;
    QTRY_VERIFY_WITH_TIMEOUT(s.data().rounds(2).size() > 30 && lastGlobalAccuracy(s.data()) > 0, 60000);
    const double accBefore = lastGlobalAccuracy(s.data());
    const double tKill = s.data().lastRound(0)->t;
    QSignalSpy regrouped(&s, &core::RunSession::groupChanged);
    run.cluster->kill(2);

    QTRY_COMPARE_WITH_TIMEOUT(s.workerState(2), protocol::WorkerState::Lost, 20000);
    QVERIFY(regrouped.count() == 1 || regrouped.wait(5000));
    QCOMPARE(s.generation(), 1);
    QCOMPARE(s.members(), (QList<int>{0, 1, 3}));
    // The survivors keep training in the new group.
    QTRY_VERIFY_WITH_TIMEOUT(roundsAfter(s.data(), 0, tKill + 1) > 20 && roundsAfter(s.data(), 3, tKill + 1) > 20, 60000);
    QVERIFY(run.waitFinished(90000));
    QVERIFY2(run.ok, qPrintable(run.message));
    QVERIFY2(run.message.contains("lost worker(s) 2"), qPrintable(run.message));

    const core::RunData &d = s.data();
    QVERIFY(!d.lostReason(2).isEmpty());
    QCOMPARE(roundsAfter(d, 2, tKill + 2), 0);  // nothing but what was in flight
    for (int w : {0, 1, 3}) {
        QVERIFY(d.outcome(w).value("ok").toBool());
        // The three survivors share the global batch after the loss.
        const auto *last = d.lastRound(w);
        QVERIFY(last);
        QVERIFY2(last->linkBytes.size() == 4 && last->linkBytes[2] == 0,
                 "per-link telemetry is indexed by worker id and nothing goes to the lost worker");
    }
    const double accAfter = lastGlobalAccuracy(d);
    QVERIFY2(accAfter > accBefore, qPrintable(QString("accuracy %1 -> %2").arg(accBefore).arg(accAfter)));
}

void TestWorkerFaults::restartedWorkerRejoinsWithCurrentParameters()
{
    protocol::JobSpec job = faultJob("allreduce");
    job.verifyReplicas = true;  // BSP replicas are identical after every step
    job.budget.seconds = 40;
    test::LocalRun run;
    QVERIFY(run.start(job, 3));
    core::RunSession &s = *run.session;
    QTRY_VERIFY_WITH_TIMEOUT(s.data().rounds(0).size() > 30 && lastGlobalAccuracy(s.data()) > 0, 60000);
    // Worker 0 hosts the first rendezvous: the next group must form without it.
    run.cluster->kill(0);
    QTRY_COMPARE_WITH_TIMEOUT(s.members(), (QList<int>{1, 2}), 20000);
    const qint64 roundAtLoss = s.data().lastRound(1)->round;
    QTRY_VERIFY_WITH_TIMEOUT(s.data().lastRound(1)->round > roundAtLoss + 10, 60000);

    QSignalSpy restarted(run.cluster.get(), &core::LocalCluster::restarted);
    run.cluster->restart(0);
    QVERIFY(restarted.wait(30000));
    QVERIFY(s.rejoin(0, run.cluster->endpoints()[0]));
    QTRY_COMPARE_WITH_TIMEOUT(s.members(), (QList<int>{0, 1, 2}), 20000);
    QCOMPARE(s.generation(), 2);
    const qsizetype before = s.data().rounds(0).size();
    QTRY_VERIFY_WITH_TIMEOUT(s.data().rounds(0).size() > before + 20, 60000);
    QVERIFY(run.waitFinished(90000));
    QVERIFY2(run.ok, qPrintable(run.message));

    // The rejoined worker took the group's round count and parameters: from
    // its first step on, its replica equals the others' at every round.
    const core::RunData &d = s.data();
    const qint64 firstRejoined = d.rounds(0)[before].round;
    QVERIFY2(firstRejoined > roundAtLoss, "the rejoined worker continues the group's round count");
    std::map<qint64, std::set<quint64>> digests;
    for (int w = 0; w < 3; ++w) {
        for (const auto &r : d.rounds(w)) {
            if (r.round >= firstRejoined)
                digests[r.round].insert(r.paramDigest);
        }
    }
    QVERIFY(digests.size() > 20);
    for (const auto &[round, set] : digests)
        QVERIFY2(set.size() == 1, qPrintable(QString("replicas differ after round %1").arg(round)));
    QVERIFY(d.lostReason(0).isEmpty());
    QVERIFY(d.outcome(0).value("ok").toBool());
}

void TestWorkerFaults::lostWorkerStopsRunWhenNotElastic()
{
    test::LocalRun run;
    run.session->setElastic(false);
    QVERIFY(run.start(faultJob("allreduce"), 3));
    core::RunSession &s = *run.session;
    QTRY_VERIFY_WITH_TIMEOUT(s.data().rounds(1).size() > 10, 60000);
    run.cluster->kill(1);
    QVERIFY(run.waitFinished(60000));
    QVERIFY(!run.ok);
    QVERIFY2(run.message.contains("worker 1 lost"), qPrintable(run.message));
    QCOMPARE(s.generation(), 0);
}

// Another program holds the port of a generation's rendezvous: the host
// cannot listen there, the controller retries with the next generation's
// port, and the run goes on, at its start and at a regroup alike.
void TestWorkerFaults::rendezvousOnATakenPortIsRetried()
{
    const quint16 base = core::pickFreePort();
    QTcpServer takenAtStart, takenAtRegroup;
    QVERIFY(takenAtStart.listen(QHostAddress::LocalHost, base));
    QVERIFY(takenAtRegroup.listen(QHostAddress::LocalHost, base + 2));
    test::LocalRun run;
    QStringList log;
    QObject::connect(run.session.get(), &core::RunSession::logMessage, [&](const QString &m) { log.append(m); });
    QVERIFY(run.start(faultJob("allreduce"), 3, 60000, base));
    core::RunSession &s = *run.session;
    QTRY_VERIFY2_WITH_TIMEOUT(s.data().rounds(2).size() > 10, qPrintable(log.join('\n')), 60000);
    QCOMPARE(s.generation(), 1);
    run.cluster->kill(2);
    QTRY_COMPARE_WITH_TIMEOUT(s.members(), (QList<int>{0, 1}), 20000);
    const qint64 roundAtLoss = s.data().lastRound(0)->round;
    QTRY_VERIFY2_WITH_TIMEOUT(s.data().lastRound(0)->round > roundAtLoss + 10, qPrintable(log.join('\n')), 60000);
    QCOMPARE(s.generation(), 3);
    const QStringList retries = log.filter("did not form");
    QVERIFY2(retries.size() == 2, qPrintable(log.join('\n')));
    QVERIFY2(retries[0].contains("generation 0") && retries[0].contains("cannot host the rendezvous"), qPrintable(retries[0]));
    QVERIFY2(retries[1].contains("generation 2") && retries[1].contains(QString::number(base + 3)), qPrintable(retries[1]));
    s.stop();
    QVERIFY(run.waitFinished(60000));
    QVERIFY2(run.ok, qPrintable(run.message));
}

void TestWorkerFaults::cliRestartsLostWorker()
{
    QTemporaryDir out;
    QProcess p;
    QByteArray stdoutSeen, stderrSeen;
    QList<qint64> agents;
    // A small evaluation: on a slow machine 3 replicas scoring 10000 images
    // every 2 s stretched the 25 s run to 98 s of wall time.
    test::startTrainingRun(p, {"run", "--workers", "3", "--strategy", "dlion", "--model", "mlp", "--seconds", "25", "--restart-lost", "1",
                               "--option", "timeout_s=10", "--eval-samples", "1000", "--out", out.path()},
                           60000, &stdoutSeen, &agents);
    if (QTest::currentTestFailed())
        return;
    QCOMPARE(agents.size(), 3);
    ::kill(pid_t(agents[1]), SIGKILL);
    // Lost, the others regroup, the agent is restarted and rejoins.
    QTRY_VERIFY_WITH_TIMEOUT((stderrSeen += p.readAllStandardError()).contains("rejoined"), 60000);
    QVERIFY2(stderrSeen.contains("lost") && stderrSeen.contains("restarting worker"), stderrSeen.constData());
    QVERIFY(p.waitForFinished(180000));
    stdoutSeen += p.readAllStandardOutput();
    stderrSeen += p.readAllStandardError();
    QVERIFY2(p.exitCode() == 0, (stdoutSeen + stderrSeen).right(900).constData());
    QVERIFY(stdoutSeen.contains("run finished"));
    QVERIFY(QFile::exists(QDir(out.path()).filePath("summary.json")));

    // Bad values are refused before anything starts.
    QProcess bad;
    bad.start(qEnvironmentVariable("DLION_CLI"), {"run", "--restart-lost", "soon", "--out", out.path()});
    QVERIFY(bad.waitForFinished(30000));
    QCOMPARE(bad.exitCode(), 2);
    QVERIFY(bad.readAllStandardError().contains("--restart-lost"));
}

void TestWorkerFaults::slowLinksCarryLessAndTrainingGoesOn()
{
    // Links 0 <-> 1 crawl at 0.1 Mbit/s from the start (a dense gradient
    // would take a minute); later 0 <-> 2 drops 100-fold to 2 Mbit/s, live.
    // Every other link has 200 Mbit/s.
    protocol::JobSpec job = faultJob("dlion");
    job.budget.seconds = 24;
    job.emulation = QJsonObject{{"links", QJsonArray{QJsonArray{0, 0.1, 200}, QJsonArray{0.1, 0, 200}, QJsonArray{200, 200, 0}}}};
    test::LocalRun run;
    QVERIFY(run.start(job, 3));
    core::RunSession &s = *run.session;
    QTRY_VERIFY_WITH_TIMEOUT(s.data().lastRound(0) && s.data().lastRound(0)->t > 8, 90000);
    const double cutAt = s.data().lastRound(0)->t;
    s.setLinkCap(0, 2, 2);
    s.setLinkCap(2, 0, 2);
    QVERIFY(run.waitFinished(120000));
    QVERIFY2(run.ok, qPrintable(run.message));

    // Bytes per round worker 0 put on each link, before and after the cut
    // (the cut takes effect within a round or two: skip a second). The slow
    // link's mean: it sends a probe every few rounds and nothing between.
    // The cut link's median: the round in flight when the cut lands had its
    // payload sized for 200 Mbit/s and carries what its 2 s deadline lets
    // through, a few hundred KB, and one or two such rounds swing a mean.
    const core::RunData &d = s.data();
    std::vector<double> toSlow, toFastBefore, toCutAfter;
    for (const auto &r : d.rounds(0)) {
        if (r.linkBytes.size() != 3)
            continue;
        if (sentAt(r) < cutAt) {
            toSlow.push_back(r.linkBytes[1]);
            toFastBefore.push_back(r.linkBytes[2]);
        } else if (sentAt(r) > cutAt + 1) {
            toCutAfter.push_back(r.linkBytes[2]);
        }
    }
    // Enough rounds for the medians; a loaded machine (2 shared cores) can
    // manage as few as 4 rounds a second here.
    const QString summary = QString::asprintf(
        "worker 0 bytes/round: to the 0.1 Mbit/s link %.0f (mean), to the 200 Mbit/s link %.0f (median), to it at "
        "2 Mbit/s %.0f (median); rounds %zu + %zu",
        mean(toSlow), median(toFastBefore), median(toCutAfter), toFastBefore.size(), toCutAfter.size());
    qInfo("%s", qPrintable(summary));
    QVERIFY2(toFastBefore.size() > 20 && toCutAfter.size() > 20, qPrintable(summary));
    QVERIFY2(mean(toSlow) * 20 < median(toFastBefore), qPrintable(summary));
    QVERIFY2(median(toCutAfter) * 20 < median(toFastBefore), qPrintable(summary));
    // Training went on at both stages and learned.
    QVERIFY(lastGlobalAccuracy(d) > 0.6);
    QVERIFY(d.outcome(0).value("ok").toBool() && d.outcome(2).value("ok").toBool());
}

void TestWorkerFaults::cutLinksCarryNextToNothingAndTrainingGoesOn()
{
    // Links 0 <-> 1 are all but cut from the start (0.01 Mbit/s, 1250 B/s:
    // a 16 KiB probe would take 13 s, past the 10 s group timeout); at 10 s
    // the established links 0 <-> 2 are cut the same way, with the payload
    // sized for 200 Mbit/s already due. Links 1 <-> 2 keep 200 Mbit/s.
    // Every message pays its link too: a round's header and the control
    // rows take tens of milliseconds on a cut link (at 0.001 Mbit/s they
    // would take seconds, and a run of 20 s would do a handful of rounds).
    const double cutAt = 10;
    protocol::JobSpec job = faultJob("dlion");
    job.budget.seconds = 26;
    // A fixed round budget sizes the payloads (500 KB a round at 200
    // Mbit/s) whatever this machine's compute speed. With the default,
    // the slowest worker's compute time, a fast BLAS shrank the 200 Mbit/s
    // link's payload to 70 KB a round, while the cut link's share per
    // round (its header and control rows, about 190 bytes) does not shrink.
    job.strategyOptions[QStringLiteral("round_budget_s")] = 0.02;
    job.emulation = QJsonObject{
        {"links", QJsonArray{QJsonArray{0, 0.01, 200}, QJsonArray{0.01, 0, 200}, QJsonArray{200, 200, 0}}},
        {"schedule", QJsonArray{QJsonObject{{"at_s", cutAt}, {"link", QJsonArray{0, 2}}, {"mbps", 0.01}},
                                QJsonObject{{"at_s", cutAt}, {"link", QJsonArray{2, 0}}, {"mbps", 0.01}}}}};
    test::LocalRun run;
    QVERIFY(run.start(job, 3));
    QVERIFY(run.waitFinished(90000));
    QVERIFY2(run.ok, qPrintable(run.message));

    // Mean bytes per round on each link, before and after the cut (skipping
    // the second in which it takes effect).
    const core::RunData &d = run.session->data();
    constexpr double kEnd = 1e9;
    int all = 0, before = 0, after = 0, before2 = 0, after2 = 0;
    const double toCut = meanLinkBytes(d, 0, 1, 0, kEnd, &all);
    const double toFastBefore = meanLinkBytes(d, 0, 2, 0, cutAt, &before);
    const double toCutAfter = meanLinkBytes(d, 0, 2, cutAt + 1, kEnd, &after);
    const double normalBefore = meanLinkBytes(d, 1, 2, 0, cutAt, &before2);
    const double normalAfter = meanLinkBytes(d, 1, 2, cutAt + 1, kEnd, &after2);
    const QString rounds = QString::asprintf("rounds of worker 0: %d before the cut, %d after; of worker 1: %d + %d", before,
                                             after, before2, after2);
    qInfo("%s", qPrintable(rounds));
    QVERIFY2(before > 15 && after > 15 && before2 > 15 && after2 > 15, qPrintable(rounds));
    qInfo("bytes/round: 0 -> 1 (0.01 Mbit/s) %.0f; 0 -> 2 at 200 Mbit/s %.0f, cut to 0.01 %.0f; "
          "1 -> 2 (200 Mbit/s) %.0f before, %.0f after",
          toCut, toFastBefore, toCutAfter, normalBefore, normalAfter);
    QVERIFY(toCut * 1000 < toFastBefore);
    QVERIFY(toCutAfter * 1000 < toFastBefore);
    QVERIFY(normalAfter * 2 > normalBefore);
    // Training went on and learned.
    const auto first = std::find_if(d.evals().begin(), d.evals().end(), [](const auto &e) { return e.primary; });
    QVERIFY(first != d.evals().end());
    QVERIFY(lastGlobalAccuracy(d) > first->globalAccuracy + 0.02);
    QVERIFY(lastGlobalAccuracy(d) > 0.6);
}

QTEST_GUILESS_MAIN(TestWorkerFaults)
#include "tst_worker_faults.moc"
