// DLion and the baselines on real agents and real Fashion-MNIST, with the
// emulated micro-cloud (compute slowdowns, heterogeneous WAN links).
#include "cluster_fixture.h"

#include <QJsonArray>

using namespace dlion;

namespace {

protocol::JobSpec fashionJob(const QString &strategy, double target)
{
    protocol::JobSpec job;
    job.strategy = strategy;
    job.model = "lenet5";
    job.dataset = "fashion-mnist";
    job.budget.targetAccuracy = target;
    job.budget.seconds = 240;  // a bound, not the expectation
    job.evalIntervalS = 1.5;
    job.evalSamples = 2000;
    return job;
}

double meanShare(const core::RunData &d, int worker)
{
    double sum = 0;
    const auto &rounds = d.rounds(worker);
    for (const auto &r : rounds)
        sum += r.share;
    return rounds.isEmpty() ? 0 : sum / double(rounds.size());
}

} // namespace

class TestStrategies : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void dlionAdaptsToSlowWorkersAndMergesOnRequest();
    void baselinesTrain_data();
    void baselinesTrain();
    void asynchronousWorkersRunAtTheirOwnPace_data();
    void asynchronousWorkersRunAtTheirOwnPace();
    void badKnobFailsWithFieldName();
};

void TestStrategies::dlionAdaptsToSlowWorkersAndMergesOnRequest()
{
    protocol::JobSpec job = fashionJob("dlion", 0.80);
    job.slowdown = {1, 1, 2, 4};
    job.emulation = QJsonObject{{"links", "wan-hetero"}};
    // Merges only on request; a fixed round budget (50 ms) sizes the links'
    // payloads the same whatever the machine's speed (the default, the
    // round's compute time, lets both links carry everything on a slow one).
    job.strategyOptions = QJsonObject{{"dkt_period", 1000000}, {"round_budget_s", 0.05}};
    test::LocalRun run;
    QVERIFY(run.start(job, 4));
    core::RunSession &s = *run.session;
    QTRY_VERIFY_WITH_TIMEOUT(s.data().rounds(3).size() > 30, 60000);
    QSignalSpy merges(&s, &core::RunSession::mergeObserved);
    s.mergeNow();
    QTRY_VERIFY_WITH_TIMEOUT(!merges.isEmpty() || s.state() != core::RunSession::State::Running, 30000);
    QVERIFY2(!merges.isEmpty(), "merge now produced no merge event");
    const auto merge = merges.first().first().value<protocol::MergeEvent>();
    QVERIFY(merge.manual);
    QVERIFY(merge.from != merge.to);
    QVERIFY(merge.scoreFrom > merge.scoreBefore);

    // Worker 0 becomes 8x slower mid-run: within a few rounds its share
    // falls below worker 1's (they were equal).
    s.setSlowdown(0, 8.0);
    auto lastShare = [&](int w) { return s.data().lastRound(w)->share; };
    QTRY_VERIFY_WITH_TIMEOUT(lastShare(0) < 0.5 * lastShare(1) || s.state() != core::RunSession::State::Running, 30000);
    QVERIFY2(lastShare(0) < 0.5 * lastShare(1), qPrintable(QString("shares %1 vs %2").arg(lastShare(0)).arg(lastShare(1))));
    QCOMPARE(s.data().lastRound(0)->slowdown, 8.0);

    QVERIFY(run.waitFinished(240000));
    QVERIFY2(run.ok, qPrintable(run.message));
    const core::RunData &d = s.data();
    // The run stopped at the target; workers finish the rounds they are in
    // before they see the stop, so the final evaluation may sit a little off it.
    QVERIFY2(d.timeToAccuracy(0.80).has_value(), qPrintable(QString::number(d.lastGlobalEval()->globalAccuracy)));
    // Weighted dynamic batching: the 4x slower worker computes a smaller share.
    const double fast = meanShare(d, 1), slowest = meanShare(d, 3);
    QVERIFY2(slowest < 0.6 * fast, qPrintable(QString("shares %1 vs %2").arg(fast).arg(slowest)));
    // Prioritized exchange: the slowest links carry a smaller fraction.
    const auto &last = d.rounds(0).constLast();
    QCOMPARE(int(last.linkFraction.size()), 4);
    QVERIFY(last.linkMbps[2] > 0 && last.linkMbps[3] > last.linkMbps[2]);  // links 0-3 (40) vs 0-2 (10)
    QVERIFY2(last.linkFraction[3] > last.linkFraction[2],
             qPrintable(QString("fractions %1 (40 Mbit/s, estimated %2) vs %3 (10 Mbit/s, estimated %4)")
                            .arg(last.linkFraction[3]).arg(last.linkMbps[3]).arg(last.linkFraction[2]).arg(last.linkMbps[2])));
}

void TestStrategies::baselinesTrain_data()
{
    QTest::addColumn<QString>("strategy");
    for (const char *s : {"gaia", "ako", "hop"})
        QTest::newRow(s) << QString(s);
}

void TestStrategies::baselinesTrain()
{
    QFETCH(QString, strategy);
    protocol::JobSpec job = fashionJob(strategy, 0.75);
    job.emulation = QJsonObject{{"links", "lan"}};
    test::LocalRun run;
    QVERIFY(run.start(job, 3));
    QVERIFY(run.waitFinished(240000));
    QVERIFY2(run.ok, qPrintable(run.message));
    const auto e = run.session->data().lastGlobalEval();
    QVERIFY2(run.session->data().timeToAccuracy(0.75).has_value(), qPrintable(QString::number(e->globalAccuracy)));
    QVERIFY(run.session->data().totalBytesSent() > 0);
}

void TestStrategies::asynchronousWorkersRunAtTheirOwnPace_data()
{
    QTest::addColumn<QString>("strategy");
    QTest::addColumn<QJsonObject>("options");
    QTest::addColumn<double>("minRatio");  // the fast worker's rounds over the slow one's, at least
    QTest::addColumn<int>("maxLead");      // the fast worker's rounds minus the slow one's, at most (-1: any)
    QTest::newRow("gaia") << "gaia" << QJsonObject{} << 2.5 << -1;
    QTest::newRow("ako") << "ako" << QJsonObject{} << 2.5 << -1;
    QTest::newRow("hop, staleness 3") << "hop" << QJsonObject{{"staleness", 3}} << 0.0 << 4;
    QTest::newRow("hop, staleness 3, skipping") << "hop" << QJsonObject{{"staleness", 3}, {"skip", true}} << 1.5 << -1;
    QTest::newRow("allreduce (lock-step)") << "allreduce" << QJsonObject{} << 0.0 << 1;
}

void TestStrategies::asynchronousWorkersRunAtTheirOwnPace()
{
    // Two workers, one 4x slower: an asynchronous worker does as many rounds
    // as its speed allows; Hop's bound holds the fast one within s rounds
    // of the slow one unless the slow one skips; all-reduce is lock-step.
    QFETCH(QString, strategy);
    QFETCH(QJsonObject, options);
    QFETCH(double, minRatio);
    QFETCH(int, maxLead);
    protocol::JobSpec job;
    job.strategy = strategy;
    job.model = "mlp";
    job.dataset = "fashion-mnist";
    job.slowdown = {1, 4};
    job.evalIntervalS = 2;
    job.evalSamples = 1000;
    job.budget.seconds = 8;
    job.strategyOptions = options;
    test::LocalRun run;
    QVERIFY(run.start(job, 2) && run.waitFinished(120000));
    QVERIFY2(run.ok, qPrintable(run.message));
    const core::RunData &d = run.session->data();
    const auto fast = d.rounds(0).size(), slow = d.rounds(1).size();
    const QString counts = QString("rounds: fast worker %1, slow worker %2").arg(fast).arg(slow);
    qInfo("%s", qPrintable(counts));
    QVERIFY2(slow > 10, qPrintable(counts));
    QVERIFY2(double(fast) >= minRatio * double(slow), qPrintable(counts));
    if (maxLead >= 0)
        QVERIFY2(fast - slow <= maxLead, qPrintable(counts));
    // Every strategy's evaluations reach the record, and training learned.
    QVERIFY2(d.lastGlobalEval()->globalAccuracy > 0.6, qPrintable(QString::number(d.lastGlobalEval()->globalAccuracy)));
}

void TestStrategies::badKnobFailsWithFieldName()
{
    protocol::JobSpec job;
    job.strategy = "gaia";
    job.dataset = "synthetic";
    job.budget.seconds = 30;
    job.strategyOptions = QJsonObject{{"treshold", 0.1}};
    test::LocalRun run;
    QVERIFY(run.start(job, 2));
    QVERIFY(run.waitFinished(60000));
    QVERIFY(!run.ok);
    QVERIFY2(run.message.contains("strategy_options.treshold"), qPrintable(run.message));
}

QTEST_GUILESS_MAIN(TestStrategies)
#include "tst_strategies.moc"
