// The control center's window against FakeAgents (tests/common): the real
// protocol on loopback, no engine, so every slot starts its own agents and
// its own window, runs alone and in any order, and takes about a second.
// The window runs the job on them as on agents started by hand
// (MainWindow::startOnAgents). tst_studio_gui is the integration test with
// real dlion-agent processes.
#include "fake_agent.h"

#include <dashboard.h>
#include <handshake.h>
#include <heatmap_plot.h>
#include <live_controls.h>
#include <local_cluster_form.h>
#include <cluster_page.h>
#include <main_window.h>
#include <report_qcp.h>
#include <run_store.h>
#include <worker_status_list.h>

#include <QAction>
#include <QComboBox>
#include <QJsonArray>
#include <QJsonDocument>
#include <QPlainTextEdit>
#include <QToolBar>
#include <QtTest>

#include <memory>

using namespace dlion;
using test::FakeAgent;
using Phase = ui::RunController::Phase;
using protocol::WorkerState;

namespace {

constexpr int kRounds = 5;
constexpr int kWaitMs = 10000;  // far above what a step takes; only a hang reaches it

FakeAgent::Script trainsUntilStopped(FakeAgent::Fault fault = FakeAgent::Fault::None)
{
    return {fault, kRounds, 300, true};
}

} // namespace

class TestStudioFake : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void initTestCase();
    void init();
    void cleanup();
    void liveTelemetryReachesTheDashboard();
    void busyDashboardPaintsEveryPlotInTurn();
    void stopSendsStopAndTheRunIsStored();
    void pauseResumeAndMergeSendTheirCommands();
    void liveSlowdownReachesTheWorker();
    void droppedWorkerIsShownLost();
    void silentWorkerIsReportedAfterTheTimeout();
    void refusedJobShowsTheAgentsMessage();
    void slowHandshakeStillConnects();
    void wrongNumberOfAgentsIsRefused();

private:
    // Starts one FakeAgent per script and runs the set-up job on them.
    void startRun(const QList<FakeAgent::Script> &scripts);
    // startRun(), then waits until every worker trains.
    void startTraining(const QList<FakeAgent::Script> &scripts);
    void click(QAction *action);
    void waitEnded(Phase expected);
    QString log() const { return m_window->findChild<QPlainTextEdit *>(QStringLiteral("log"))->toPlainText(); }
    ui::RunController *run() { return m_window->controller(); }

    QByteArray m_secret;
    std::vector<std::unique_ptr<FakeAgent>> m_agents;
    std::unique_ptr<ui::MainWindow> m_window;
};

void TestStudioFake::initTestCase()
{
    QStandardPaths::setTestModeEnabled(true);
    QCoreApplication::setOrganizationName(QStringLiteral("DLionTest"));
    QCoreApplication::setApplicationName(QStringLiteral("tst_studio_fake"));
}

void TestStudioFake::init()
{
    QSettings().clear();  // a closed window saves its setup; each slot starts from the defaults
    m_secret = protocol::handshake::makeSecret();
    m_window = std::make_unique<ui::MainWindow>();
    m_window->resize(1400, 900);
    m_window->show();
    QVERIFY(QTest::qWaitForWindowExposed(m_window.get()));
    // A job every agent takes (a fake agent trains on nothing anyway).
    auto *dataset = m_window->findChild<QComboBox *>(QStringLiteral("dataset"));
    dataset->setCurrentIndex(dataset->findData(QStringLiteral("synthetic")));
}

void TestStudioFake::cleanup()
{
    if (m_window)
        m_window->close();
    m_window.reset();
    m_agents.clear();
}

void TestStudioFake::startRun(const QList<FakeAgent::Script> &scripts)
{
    QList<core::AgentEndpoint> endpoints;
    for (const FakeAgent::Script &s : scripts) {
        m_agents.push_back(std::make_unique<FakeAgent>(m_secret, s));
        QVERIFY(m_agents.back()->listen());
        endpoints.append(m_agents.back()->endpoint());
    }
    m_window->clusterPage()->localForm()->setWorkers(int(scripts.size()));
    QVERIFY2(m_window->validationMessage().isEmpty(), qPrintable(m_window->validationMessage()));
    m_window->startOnAgents(endpoints, m_secret);
}

void TestStudioFake::startTraining(const QList<FakeAgent::Script> &scripts)
{
    startRun(scripts);
    QTRY_VERIFY2_WITH_TIMEOUT(run()->session().state() == core::RunSession::State::Running, qPrintable(log()), kWaitMs);
    for (int w = 0; w < scripts.size(); ++w)
        QTRY_COMPARE_WITH_TIMEOUT(m_window->workerList()->state(w), WorkerState::Running, kWaitMs);
}

void TestStudioFake::click(QAction *action)
{
    QVERIFY2(action->isEnabled(), qPrintable(action->text() + " is disabled"));
    QWidget *button = m_window->findChild<QToolBar *>(QStringLiteral("runToolBar"))->widgetForAction(action);
    QVERIFY(button);
    QTest::mouseClick(button, Qt::LeftButton);
}

void TestStudioFake::waitEnded(Phase expected)
{
    QTRY_VERIFY2_WITH_TIMEOUT(run()->phase() == Phase::Finished || run()->phase() == Phase::Failed, qPrintable(log()), kWaitMs);
    QVERIFY2(run()->phase() == expected, qPrintable(log()));
    QVERIFY(m_window->startAction()->isEnabled());
}

void TestStudioFake::liveTelemetryReachesTheDashboard()
{
    startTraining({trainsUntilStopped(), trainsUntilStopped()});
    QCOMPARE(m_window->workerList()->topLevelItemCount(), 2);
    ui::Dashboard *dash = m_window->dashboard();
    const core::TelemetryModel &model = dash->model();
    // Curves: every round's rate, loss and share, and every evaluation.
    QTRY_COMPARE_WITH_TIMEOUT(model.series(core::TelemetryModel::Metric::Accuracy, 1).size(), qsizetype(kRounds), kWaitMs);
    QTRY_COMPARE_WITH_TIMEOUT(model.series(core::TelemetryModel::Metric::Loss, 0).size(), qsizetype(kRounds), kWaitMs);
    QTRY_VERIFY_WITH_TIMEOUT(dash->pointCount() >= 4 * 2 * kRounds, kWaitMs);
    // The link matrix shows each sender's estimate (the fake's 10 × (peer + 1) Mbit/s).
    QTRY_COMPARE_WITH_TIMEOUT(dash->bandwidthMap()->value(0, 1), 20.0, kWaitMs);
    QCOMPARE(dash->bandwidthMap()->value(1, 0), 10.0);
    // Weights: each worker holds half of the global batch.
    QCOMPARE(model.lastRound(0)->share, 0.5);
    QCOMPARE(model.lastRound(1)->round, qint64(kRounds));
    QCOMPARE(run()->phase(), Phase::Running);
}

void TestStudioFake::busyDashboardPaintsEveryPlotInTurn()
{
    // 16 workers and every plot changed before every refresh: a refresh
    // paints what fits in its budget, and plots left over go first next
    // time. With no budget it paints one plot, so each gets every n-th.
    constexpr int kWorkers = 16;
    ui::Dashboard dash;
    dash.setRefreshRate(0);
    dash.setFrameBudget(0);
    dash.resize(1600, 900);
    dash.show();
    QVERIFY(QTest::qWaitForWindowExposed(&dash));
    dash.reset(kWorkers, {});
    const QList<QCustomPlot *> plots = dash.plots();
    QHash<QCustomPlot *, int> paints;
    for (QCustomPlot *p : plots)
        connect(p, &QCustomPlot::afterReplot, this, [&paints, p] { ++paints[p]; });
    const int refreshes = 3 * int(plots.size());
    for (int r = 0; r < refreshes; ++r) {
        protocol::TelemetryBatch b;
        for (int w = 0; w < kWorkers; ++w) {
            protocol::RoundRecord rec;
            rec.worker = w;
            rec.round = r;
            rec.t = 0.1 * r;
            rec.share = (1.0 + (r + w) % 3) / (2 * kWorkers);
            rec.rate = 100.0 + r + w;
            rec.loss = 1.0 / (r + 1);
            rec.linkMbps.assign(std::size_t(kWorkers), 10.0 + r);
            rec.linkFraction.assign(std::size_t(kWorkers), 1.0 / (r + 2));
            b.rounds.append(rec);
            b.evals.append({w, r, rec.t, 0.5 + 0.01 * r});
        }
        dash.model().append(b);
        QCOMPARE(dash.refresh(), 1);
    }
    int visible = 0;
    for (QCustomPlot *p : plots) {
        if (!p->isVisible())
            continue;
        ++visible;
        QVERIFY2(paints.value(p) >= 3, qPrintable(QStringLiteral("plot %1 painted %2 times in %3 refreshes")
                                                      .arg(plots.indexOf(p)).arg(paints.value(p)).arg(refreshes)));
    }
    QVERIFY(visible > 0);
    // With nothing new, what is left gets painted, and then nothing is.
    for (int i = 0; i < plots.size() && dash.refresh() > 0; ++i) {
    }
    QCOMPARE(dash.refresh(), 0);

    // Plots hidden when their data changed (another page in front) are
    // painted once shown again.
    for (QCustomPlot *p : plots)
        p->hide();
    protocol::TelemetryBatch late;
    for (int w = 0; w < kWorkers; ++w)
        late.evals.append({w, refreshes, 0.1 * refreshes, 0.9});
    dash.model().append(late);
    QCOMPARE(dash.refresh(), 0);
    for (QCustomPlot *p : plots)
        p->show();
    QCOMPARE(dash.refresh(), 1);
}

void TestStudioFake::stopSendsStopAndTheRunIsStored()
{
    startTraining({trainsUntilStopped(), trainsUntilStopped()});
    click(m_window->stopAction());
    waitEnded(Phase::Finished);
    const QString stop = protocol::commandName(protocol::Command::Stop);
    for (const auto &agent : m_agents) {
        QCOMPARE(agent->commands().count(stop), 1);
        // Agents started by hand are not told to exit: they wait for the next job.
        QVERIFY2(!agent->commands().contains(protocol::commandName(protocol::Command::Shutdown)),
                 qPrintable(agent->commands().join(' ')));
    }
    QTRY_VERIFY_WITH_TIMEOUT(m_window->workerList()->state(1) == WorkerState::Finished, kWaitMs);

    // Recorded like any run, with where it ran.
    core::RunStore store;
    QVERIFY2(store.open(run()->storePath(), core::RunStore::Mode::ReadOnly), qPrintable(store.errorString()));
    const auto stored = store.loadRun(run()->recordedRunId());
    QVERIFY2(stored, qPrintable(store.errorString()));
    QCOMPARE(stored->info.status, QStringLiteral("finished"));
    QCOMPARE(stored->info.cluster.value("kind").toString(), QStringLiteral("agents"));
    QCOMPARE(stored->info.cluster.value("agents").toArray().size(), 2);
    QCOMPARE(stored->data.rounds(0).size(), qsizetype(kRounds));
}

void TestStudioFake::pauseResumeAndMergeSendTheirCommands()
{
    startTraining({trainsUntilStopped(), trainsUntilStopped()});
    const QString pause = protocol::commandName(protocol::Command::Pause);
    const QString resume = protocol::commandName(protocol::Command::Resume);
    const QString merge = protocol::commandName(protocol::Command::MergeNow);

    click(m_window->pauseAction());
    QTRY_VERIFY_WITH_TIMEOUT(m_agents[0]->commands().contains(pause) && m_agents[1]->commands().contains(pause), kWaitMs);
    QTRY_VERIFY_WITH_TIMEOUT(m_window->workerList()->state(1) == WorkerState::Paused, kWaitMs);
    QTRY_VERIFY_WITH_TIMEOUT(m_window->statusText().contains("paused"), kWaitMs);

    click(m_window->pauseAction());  // now Resume
    QTRY_VERIFY_WITH_TIMEOUT(m_agents[0]->commands().contains(resume) && m_agents[1]->commands().contains(resume), kWaitMs);
    QTRY_VERIFY_WITH_TIMEOUT(m_window->workerList()->state(1) == WorkerState::Running, kWaitMs);
    QVERIFY(!run()->isPaused());

    // Merge now: the command, then the merge the agent reports is marked on the plots.
    const int markers = m_window->dashboard()->mergeMarkerCount();
    click(m_window->mergeAction());
    QTRY_VERIFY_WITH_TIMEOUT(m_agents[0]->commands().contains(merge) && m_agents[1]->commands().contains(merge), kWaitMs);
    QTRY_COMPARE_WITH_TIMEOUT(m_window->dashboard()->model().mergeCount(), qint64(1), kWaitMs);
    QTRY_VERIFY_WITH_TIMEOUT(m_window->dashboard()->mergeMarkerCount() > markers, kWaitMs);
    QTRY_VERIFY2_WITH_TIMEOUT(log().contains("manual merge at") && log().contains("worker 0 (80.0 % accuracy) → worker 1"),
                              qPrintable(log()), kWaitMs);
}

void TestStudioFake::liveSlowdownReachesTheWorker()
{
    startTraining({trainsUntilStopped(), trainsUntilStopped()});
    ui::LiveControls *live = m_window->liveControls();
    live->setSlowdownInput(1, 4);
    QTest::mouseClick(live->findChild<QWidget *>(QStringLiteral("applySlowdown")), Qt::LeftButton);
    QTRY_VERIFY_WITH_TIMEOUT(m_agents[1]->commands().contains(protocol::commandName(protocol::Command::SetSlowdown)), kWaitMs);
    const core::TelemetryModel &model = m_window->dashboard()->model();
    QTRY_VERIFY_WITH_TIMEOUT(model.lastRound(1) && model.lastRound(1)->slowdown == 4.0, kWaitMs);
    QCOMPARE(model.lastRound(0)->slowdown, 1.0);
}

void TestStudioFake::droppedWorkerIsShownLost()
{
    startRun({trainsUntilStopped(), trainsUntilStopped(FakeAgent::Fault::Drop)});
    QTRY_VERIFY2_WITH_TIMEOUT(m_window->workerList()->state(1) == WorkerState::Lost, qPrintable(log()), kWaitMs);
    QTRY_VERIFY2_WITH_TIMEOUT(log().contains("worker 1 lost: "), qPrintable(log()), kWaitMs);
    // The other worker is sent a group of its own and trains on; what the
    // lost one sent stays on the plots, and the window still answers.
    QTRY_COMPARE_WITH_TIMEOUT(run()->session().members(), QList<int>{0}, kWaitMs);
    QTRY_VERIFY_WITH_TIMEOUT(m_agents[0]->commands().contains(protocol::commandName(protocol::Command::Regroup)), kWaitMs);
    QCOMPARE(run()->phase(), Phase::Running);
    QTRY_COMPARE_WITH_TIMEOUT(m_window->dashboard()->model().series(core::TelemetryModel::Metric::Loss, 1).size(),
                              qsizetype(kRounds), kWaitMs);
    click(m_window->stopAction());
    waitEnded(Phase::Finished);
    QCOMPARE(run()->session().data().message(), QStringLiteral("finished without lost worker(s) 1"));
}

void TestStudioFake::silentWorkerIsReportedAfterTheTimeout()
{
    run()->session().setHeartbeatTimeout(1000);  // five of the fake's heartbeat intervals
    startRun({trainsUntilStopped(), trainsUntilStopped(FakeAgent::Fault::GoSilent)});
    QTRY_VERIFY2_WITH_TIMEOUT(m_window->workerList()->state(1) == WorkerState::Lost, qPrintable(log()), kWaitMs);
    QVERIFY2(log().contains(QStringLiteral("worker 1 lost: agent %1:%2 went silent for 1 s")
                                .arg(m_agents[1]->endpoint().host)
                                .arg(m_agents[1]->endpoint().port)),
             qPrintable(log()));
    // Worker 0 heartbeats: it is not lost, and the run goes on without worker 1.
    QCOMPARE(m_window->workerList()->state(0), WorkerState::Running);
    QCOMPARE(run()->phase(), Phase::Running);
    click(m_window->stopAction());
    waitEnded(Phase::Finished);
}

void TestStudioFake::refusedJobShowsTheAgentsMessage()
{
    startRun({trainsUntilStopped(), trainsUntilStopped(FakeAgent::Fault::RefuseJob)});
    waitEnded(Phase::Failed);
    QVERIFY2(log().contains("Run failed: worker 1 failed: invalid job: scripted refusal"), qPrintable(log()));
    QTRY_COMPARE_WITH_TIMEOUT(m_window->workerList()->state(1), WorkerState::Failed, kWaitMs);
    // The worker that took the job was told to stop.
    QVERIFY(m_agents[0]->commands().contains(protocol::commandName(protocol::Command::Stop)));

    // The store holds a readable failed run with what arrived, and the folder a summary.
    core::RunStore store;
    QVERIFY2(store.open(run()->storePath(), core::RunStore::Mode::ReadOnly), qPrintable(store.errorString()));
    const auto stored = store.loadRun(run()->recordedRunId());
    QVERIFY2(stored, qPrintable(store.errorString()));
    QCOMPARE(stored->info.status, QStringLiteral("failed"));
    QCOMPARE(stored->data.rounds(0).size(), qsizetype(kRounds));
    QCOMPARE(stored->data.rounds(1).size(), qsizetype(0));
    QFile summary(QDir(run()->runDir()).filePath(QStringLiteral("summary.json")));
    QVERIFY2(summary.open(QIODevice::ReadOnly), qPrintable(summary.fileName()));
    QJsonParseError error;
    QJsonDocument::fromJson(summary.readAll(), &error);
    QCOMPARE(error.error, QJsonParseError::NoError);
}

void TestStudioFake::slowHandshakeStillConnects()
{
    startTraining({trainsUntilStopped(FakeAgent::Fault::SlowHandshake), trainsUntilStopped()});
    QTRY_COMPARE_WITH_TIMEOUT(m_window->dashboard()->model().series(core::TelemetryModel::Metric::Loss, 0).size(),
                              qsizetype(kRounds), kWaitMs);
    click(m_window->stopAction());
    waitEnded(Phase::Finished);
}

void TestStudioFake::wrongNumberOfAgentsIsRefused()
{
    m_agents.push_back(std::make_unique<FakeAgent>(m_secret, trainsUntilStopped()));
    QVERIFY(m_agents.back()->listen());
    m_window->clusterPage()->localForm()->setWorkers(3);
    m_window->startOnAgents({m_agents.back()->endpoint()}, m_secret);
    QCOMPARE(run()->phase(), Phase::Failed);
    QVERIFY2(log().contains("The job is for 3 workers but 1 agents were given; give one agent per worker."), qPrintable(log()));
    // A short secret is named too; nothing was sent to the agent.
    m_window->clusterPage()->localForm()->setWorkers(1);
    m_window->startOnAgents({m_agents.back()->endpoint()}, "short");
    QCOMPARE(run()->phase(), Phase::Failed);
    QVERIFY2(log().contains("The run secret has 5 characters; agents require at least 32"), qPrintable(log()));
    QVERIFY(!m_agents.back()->jobReceived());
    QVERIFY(m_window->startAction()->isEnabled());
}

QTEST_MAIN(TestStudioFake)
#include "tst_studio_fake.moc"
