// The dashboard's model without a window: bounded series, incremental
// catch-up from a RunData, best accuracy, link matrices and merges.
#include <run_data.h>
#include <telemetry_model.h>

#include <QtTest>

using namespace dlion;
using Metric = core::TelemetryModel::Metric;

class TestTelemetryModel : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void seriesStayBoundedAndCountEverything();
    void catchUpAddsOnlyNewRecords();
    void catchUpStartsOverOnANewRun();
};

namespace {

protocol::RoundRecord round(int worker, qint64 r, int workers)
{
    protocol::RoundRecord rec;
    rec.worker = worker;
    rec.round = r;
    rec.t = 0.1 * double(r);
    rec.share = 1.0 / workers;
    rec.rate = 100.0 * (worker + 1);
    rec.loss = 1.0 / double(r + 1);
    rec.linkMbps.assign(std::size_t(workers), 40.0);
    rec.linkFraction.assign(std::size_t(workers), 0.25);
    return rec;
}

core::RunData emptyRun(int workers)
{
    protocol::JobSpec job;
    job.budget.seconds = 1;
    core::RunData data;
    data.reset(job, workers);
    return data;
}

} // namespace

void TestTelemetryModel::seriesStayBoundedAndCountEverything()
{
    core::TelemetryModel model(100);
    model.reset(2);
    for (qint64 r = 0; r < 1000; ++r) {
        protocol::TelemetryBatch b;
        b.rounds = {round(0, r, 2), round(1, r, 2)};
        model.append(b);
        QVERIFY(model.series(Metric::Rate, 0).size() <= 200);
    }
    const core::BoundedSeries &rate = model.series(Metric::Rate, 1);
    QCOMPARE(rate.total(), 1000);
    QVERIFY(rate.size() >= 100);
    QCOMPARE(rate.firstIndex(), rate.total() - rate.size());
    QCOMPARE(rate.x(rate.size() - 1), 99.9);  // the newest point is kept
    QCOMPARE(rate.lastY(), 200.0);
    QCOMPARE(model.series(Metric::Share, 0).lastY(), 50.0);          // percent
    QCOMPARE(model.series(Metric::FractionSent, 0).lastY(), 25.0);   // the worker's own entry is not a link
    QCOMPARE(model.linkMbps(0, 1), 40.0);
    QCOMPARE(model.linkFraction(1, 0), 0.25);
    QCOMPARE(model.roundCount(), 2000);
}

void TestTelemetryModel::catchUpAddsOnlyNewRecords()
{
    core::RunData data = emptyRun(3);
    core::TelemetryModel model;
    protocol::TelemetryBatch first;
    first.rounds = {round(0, 0, 3), round(1, 0, 3), round(2, 0, 3)};
    first.evals = {{0, 0, 0.5, 0.60, 1.0, 0.62, 1.0, 100, false, true}, {1, 0, 0.5, 0.70, 1.0, 0.62, 1.0, 100, false, false}};
    data.add(first);
    model.catchUp(data);
    QCOMPARE(model.workers(), 3);
    const quint64 revision = model.revision();
    model.catchUp(data);  // nothing new: nothing changes
    QCOMPARE(model.revision(), revision);
    QCOMPARE(model.series(Metric::Loss, 2).total(), 1);
    QCOMPARE(model.bestAccuracy().lastY(), 70.0);
    QCOMPARE(model.globalAccuracy().lastY(), 62.0);

    protocol::TelemetryBatch second;
    second.rounds = {round(2, 1, 3)};
    second.merges = {{1, 0.6, 1, 0, 0.60, 0.70, 0.5, true}};
    data.add(second);
    model.catchUp(data);
    QVERIFY(model.revision() > revision);
    QCOMPARE(model.series(Metric::Loss, 2).total(), 2);
    QCOMPARE(model.series(Metric::Loss, 0).total(), 1);
    QCOMPARE(model.mergeCount(), 1);
    QVERIFY(model.recentMerges().first().manual);
    QCOMPARE(model.merges().lastY(), 70.0);
}

void TestTelemetryModel::catchUpStartsOverOnANewRun()
{
    core::RunData data = emptyRun(2);
    protocol::TelemetryBatch longRun;
    for (qint64 r = 0; r < 50; ++r)
        longRun.rounds += {round(0, r, 2), round(1, r, 2)};
    data.add(longRun);
    core::TelemetryModel model;
    model.catchUp(data);
    QCOMPARE(model.series(Metric::Loss, 0).total(), 50);
    const quint64 epoch = model.epoch();

    // The next run reuses the same RunData with as many workers: the model
    // must drop the old run, not wait until the new one outgrows it.
    const protocol::JobSpec job = data.job();
    data.reset(job, 2);
    protocol::TelemetryBatch fresh;
    fresh.rounds = {round(0, 0, 2), round(0, 1, 2), round(1, 0, 2)};
    data.add(fresh);
    model.catchUp(data);
    QVERIFY(model.epoch() != epoch);
    QCOMPARE(model.series(Metric::Loss, 0).total(), 2);
    QCOMPARE(model.series(Metric::Loss, 1).total(), 1);
    QCOMPARE(model.lastRound(0)->round, 1);
    QCOMPARE(model.roundCount(), 3);
}

QTEST_GUILESS_MAIN(TestTelemetryModel)
#include "tst_telemetry_model.moc"
