// The control center driven through its real widgets: set up a local
// 3-worker micro-cloud, run it against real dlion-agent processes, watch
// telemetry reach the plots, merge, change the emulation live, stop, and
// lose an agent without the window freezing, close the window with the run
// left training and take it over in a new one; the same job started from the
// GUI and from dlion run is stored alike. Screenshots go to
// <build>/artifacts/. The integration test of the window; tst_studio_fake
// covers the same controls against FakeAgents. Slots run in order share one
// run; a slot run alone sets up and starts what it needs.
#include "../integration/child_processes.h"

#include <attach_file.h>
#include <cluster_page.h>
#include <dashboard.h>
#include <field_marker.h>
#include <heatmap_plot.h>
#include <job_builder.h>
#include <job_editor.h>
#include <live_controls.h>
#include <local_cluster.h>
#include <local_cluster_form.h>
#include <main_window.h>
#include <run_list_dialog.h>
#include <run_store.h>
#include <worker_status_list.h>

#include <QAction>
#include <QCborMap>
#include <QComboBox>
#include <QCryptographicHash>
#include <QDir>
#include <QDoubleSpinBox>
#include <QLabel>
#include <QLineEdit>
#include <QMessageBox>
#include <QPushButton>
#include <QPlainTextEdit>
#include <QRadioButton>
#include <QSpinBox>
#include <QTableWidget>
#include <QToolBar>
#include <QtTest>
#include <report_qcp.h>

using namespace dlion;
using Phase = ui::RunController::Phase;

class TestStudioGui : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void initTestCase();
    void setupFlowMarksInvalidFields();
    void runShowsLiveTelemetry();
    void mergeNowShowsTheMergeEvent();
    void liveSlowdownReachesTheWorker();
    void stopEndsTheRun();
    void darkPaletteRethemesThePlots();
    void lostWorkerRegroupsAndRestarts();
    void closedWindowLeavesTheRunToTakeOver();
    void guiAndCliStoreTheSameRun();
    void cleanupTestCase();

private:
    template <typename T>
    T *child(const char *name) const
    {
        T *w = m_window->findChild<T *>(QLatin1String(name));
        if (!w)
            qFatal("no widget named %s", name);
        return w;
    }
    void click(QAction *action);
    void typeInto(QAbstractSpinBox *spin, const QString &text);
    void selectData(const char *comboName, const QString &data);
    void screenshot(const QString &name);
    // The 3-worker local setup and job every run here uses (once per window).
    void setUp();
    // Fails at once (instead of a chain of timeouts) when the run died; a
    // slot run alone (no run started yet) starts one instead.
    void requireRunning();

    std::unique_ptr<ui::MainWindow> m_window;
    QString m_strategy;
    QTemporaryDir m_checkpoints;
    bool m_setUp = false;
};

void TestStudioGui::initTestCase()
{
    QStandardPaths::setTestModeEnabled(true);
    QCoreApplication::setOrganizationName(QStringLiteral("DLionTest"));
    QCoreApplication::setApplicationName(QStringLiteral("tst_studio_gui"));
    QSettings().clear();
    QVERIFY2(!core::LocalCluster::agentProgram().isEmpty(), "dlion-agent not found (set DLION_AGENT)");
    QVERIFY(QDir().mkpath(QStringLiteral(DLION_ARTIFACTS_DIR)));
    m_window = std::make_unique<ui::MainWindow>();
    m_window->resize(1600, 1000);
    m_window->show();
    QVERIFY(QTest::qWaitForWindowExposed(m_window.get()));
    m_strategy = qEnvironmentVariable("DLION_GUI_TEST_STRATEGY", QStringLiteral(DLION_GUI_TEST_DEFAULT_STRATEGY));
}

void TestStudioGui::click(QAction *action)
{
    QVERIFY2(action->isEnabled(), qPrintable(action->text() + " is disabled"));
    QToolBar *bar = m_window->findChild<QToolBar *>(QStringLiteral("runToolBar"));
    QWidget *button = bar->widgetForAction(action);
    QVERIFY(button);
    QTest::mouseClick(button, Qt::LeftButton);
}

void TestStudioGui::typeInto(QAbstractSpinBox *spin, const QString &text)
{
    spin->setFocus();
    QTest::keyClick(spin, Qt::Key_A, Qt::ControlModifier);
    QTest::keyClicks(spin, text);
    QTest::keyClick(spin, Qt::Key_Tab);
}

void TestStudioGui::selectData(const char *comboName, const QString &data)
{
    auto *combo = child<QComboBox>(comboName);
    const int index = combo->findData(data);
    QVERIFY2(index >= 0, qPrintable(data));
    combo->setCurrentIndex(index);
}

void TestStudioGui::screenshot(const QString &name)
{
    QCoreApplication::processEvents();
    const QString path = QDir(QStringLiteral(DLION_ARTIFACTS_DIR)).filePath(name + QStringLiteral(".png"));
    QVERIFY2(m_window->grab().save(path), qPrintable(path));
    qInfo("screenshot: %s", qPrintable(path));
}

void TestStudioGui::requireRunning()
{
    if (m_window->controller()->phase() == Phase::Idle) {
        setUp();
        click(m_window->startAction());
        // Long enough for a checkpoint (every second) and a few evaluations.
        const core::RunData &data = m_window->controller()->session().data();
        QTRY_VERIFY_WITH_TIMEOUT(m_window->controller()->phase() == Phase::Running && data.lastRound(0) && data.lastRound(0)->t > 3,
                                 60000);
    }
    QVERIFY2(m_window->controller()->phase() == Phase::Running,
             qPrintable(QStringLiteral("the run is not running: %1; log: %2")
                            .arg(m_window->statusText(), m_window->findChild<QPlainTextEdit *>(QStringLiteral("log"))->toPlainText())));
}

void TestStudioGui::setUp()
{
    if (m_setUp)
        return;
    m_setUp = true;
    m_window->showPage(ui::MainWindow::Page::Cluster);
    auto *local = child<QRadioButton>("modeLocal");
    QTest::mouseClick(local, Qt::LeftButton, {}, QPoint(8, local->height() / 2));  // on the indicator
    QVERIFY(local->isChecked());
    typeInto(child<QSpinBox>("workers"), QStringLiteral("3"));
    auto *slowdown = child<QTableWidget>("slowdown");
    QCOMPARE(slowdown->rowCount(), 3);
    slowdown->item(2, 0)->setText(QStringLiteral("2"));
    selectData("linkPreset", QStringLiteral("lan-hetero"));
    QCOMPARE(child<QTableWidget>("linkMatrix")->item(0, 1)->text(), QStringLiteral("400"));
    screenshot(QStringLiteral("setup-cluster"));

    m_window->showPage(ui::MainWindow::Page::Job);
    // Fashion-MNIST rather than the synthetic set: on synthetic data every
    // replica reaches 100 % at once, and with no worker behind the best one
    // knowledge transfer has nothing to merge.
    selectData("dataset", QStringLiteral("fashion-mnist"));
    selectData("model", QStringLiteral("mlp"));
    selectData("strategy", m_strategy);
    typeInto(child<QDoubleSpinBox>("eval_interval_s"), QStringLiteral("1"));
    typeInto(child<QSpinBox>("eval_samples"), QStringLiteral("1500"));
    // Checkpoints every second into this test's folder (looked at once the run stops).
    QTest::keyClicks(child<QLineEdit>("checkpoint.dir"), m_checkpoints.path());
    typeInto(child<QDoubleSpinBox>("checkpoint.interval_s"), QStringLiteral("1"));
    QCOMPARE(m_window->jobEditor()->job().value("checkpoint").toObject().value("dir").toString(), m_checkpoints.path());
    typeInto(child<QDoubleSpinBox>("budget.seconds"), QStringLiteral("300"));
}

void TestStudioGui::setupFlowMarksInvalidFields()
{
    setUp();
    m_window->showPage(ui::MainWindow::Page::Job);
    auto *slowdown = child<QTableWidget>("slowdown");
    // No budget at all: the budget inputs are marked and Start is refused.
    typeInto(child<QDoubleSpinBox>("budget.seconds"), QStringLiteral("0"));
    QVERIFY(ui::FieldMarker::isMarked(child<QDoubleSpinBox>("budget.seconds")));
    QVERIFY(ui::FieldMarker::isMarked(child<QSpinBox>("budget.max_rounds")));
    QVERIFY(!m_window->startAction()->isEnabled());
    QVERIFY(child<QLabel>("validationBanner")->isVisible());
    QVERIFY2(m_window->validationMessage().contains("budget"), qPrintable(m_window->validationMessage()));
    screenshot(QStringLiteral("setup-job-invalid"));

    typeInto(child<QDoubleSpinBox>("budget.seconds"), QStringLiteral("300"));
    QVERIFY(!ui::FieldMarker::isMarked(child<QDoubleSpinBox>("budget.seconds")));

    // A slowdown below 1 is marked on the cluster page.
    slowdown->item(1, 0)->setText(QStringLiteral("0.5"));
    QVERIFY(ui::FieldMarker::isMarked(slowdown));
    QVERIFY(!m_window->startAction()->isEnabled());
    slowdown->item(1, 0)->setText(QStringLiteral("1"));
    QVERIFY(!ui::FieldMarker::isMarked(slowdown));
    QVERIFY2(m_window->validationMessage().isEmpty(), qPrintable(m_window->validationMessage()));
    QVERIFY(m_window->startAction()->isEnabled());
    screenshot(QStringLiteral("setup-job"));
}

void TestStudioGui::runShowsLiveTelemetry()
{
    setUp();
    click(m_window->startAction());
    ui::RunController *run = m_window->controller();
    QTRY_VERIFY_WITH_TIMEOUT(run->phase() == Phase::Running, 60000);
    ui::WorkerStatusList *workers = m_window->workerList();
    QCOMPARE(workers->topLevelItemCount(), 3);
    const auto running = protocol::WorkerState::Running;
    QTRY_VERIFY_WITH_TIMEOUT(workers->state(0) == running && workers->state(1) == running && workers->state(2) == running,
                             60000);
    ui::Dashboard *dash = m_window->dashboard();
    QTRY_VERIFY_WITH_TIMEOUT(dash->pointCount() > 30, 60000);
    const qsizetype first = dash->pointCount();
    QTRY_VERIFY_WITH_TIMEOUT(dash->pointCount() > first + 30, 30000);
    // Accuracy of every worker arrives, and the link heatmap shows estimates.
    QTRY_VERIFY_WITH_TIMEOUT(dash->model().series(core::TelemetryModel::Metric::Accuracy, 2).size() >= 3, 60000);
    QVERIFY(dash->model().bestAccuracy().size() >= 1);
    QTRY_VERIFY_WITH_TIMEOUT(dash->bandwidthMap()->value(0, 1) > 0, 30000);
    QVERIFY2(run->phase() == Phase::Running, qPrintable(m_window->statusText()));
    screenshot(QStringLiteral("dashboard"));
}

void TestStudioGui::mergeNowShowsTheMergeEvent()
{
    if (m_strategy != QLatin1String("dlion"))
        QSKIP("Merge now needs the dlion strategy's knowledge transfer, which this engine build or "
              "DLION_GUI_TEST_STRATEGY does not use; no merge event can come back");
    requireRunning();
    ui::Dashboard *dash = m_window->dashboard();
    const qint64 before = dash->model().mergeCount();
    const int markersBefore = dash->mergeMarkerCount();
    auto manualMergeSeen = [&] {
        const auto &merges = dash->model().recentMerges();
        return dash->model().mergeCount() > before
            && std::any_of(merges.cbegin(), merges.cend(), [](const protocol::MergeEvent &e) { return e.manual; });
    };
    // The engine reports a merge only for workers behind the best one; when
    // all replicas tie on the held-out batch nothing is merged, so press again.
    for (int attempt = 0; attempt < 5; ++attempt) {
        requireRunning();
        click(m_window->mergeAction());
        if (QTest::qWaitFor(manualMergeSeen, 8000))
            break;
    }
    QVERIFY2(manualMergeSeen(), "no manual merge event came back after 5 presses of Merge now");
    QTRY_VERIFY_WITH_TIMEOUT(dash->mergeMarkerCount() > markersBefore, 5000);
    screenshot(QStringLiteral("dashboard-merge"));
}

void TestStudioGui::liveSlowdownReachesTheWorker()
{
    requireRunning();
    ui::LiveControls *live = m_window->liveControls();
    live->setSlowdownInput(1, 4);
    QTest::mouseClick(live->findChild<QWidget *>(QStringLiteral("applySlowdown")), Qt::LeftButton);
    const core::TelemetryModel &model = m_window->dashboard()->model();
    QTRY_VERIFY_WITH_TIMEOUT(model.lastRound(1) && model.lastRound(1)->slowdown == 4.0, 30000);
}

void TestStudioGui::stopEndsTheRun()
{
    requireRunning();
    click(m_window->stopAction());
    ui::RunController *run = m_window->controller();
    QTRY_VERIFY_WITH_TIMEOUT(run->phase() == Phase::Finished || run->phase() == Phase::Failed, 60000);
    QVERIFY2(run->phase() == Phase::Finished, qPrintable(m_window->statusText()));
    QTRY_VERIFY_WITH_TIMEOUT(m_window->workerList()->state(0) == protocol::WorkerState::Finished, 5000);
    // Every worker checkpointed its model, keeping at most 3 files.
    for (int w = 0; w < 3; ++w) {
        const QStringList files = QDir(m_checkpoints.path()).entryList({QStringLiteral("worker-%1-round-*.ckpt").arg(w)});
        QVERIFY2(!files.isEmpty() && files.size() <= 3, qPrintable(QStringLiteral("worker %1: %2").arg(w).arg(files.join(' '))));
    }
    child<QLineEdit>("checkpoint.dir")->clear();
    QVERIFY(m_window->startAction()->isEnabled());
    QVERIFY(!m_window->mergeAction()->isEnabled());

    // The run was recorded, and the run list shows it.
    const qint64 id = run->recordedRunId();
    QVERIFY(id > 0);
    ui::RunListDialog runs(run->storePath());
    QVERIFY(runs.reload() >= 1);
    QCOMPARE(runs.table()->item(0, 0)->text(), QStringLiteral("#%1").arg(id));
    QCOMPARE(runs.table()->item(0, 2)->text(), QStringLiteral("finished"));

    // File → Export report writes it.
    QTemporaryDir out;
    const QString html = out.filePath(QStringLiteral("run.html"));
    const QString error = m_window->exportReport(id, html);
    QVERIFY2(error.isEmpty(), qPrintable(error));
    QVERIFY(QFileInfo(html).size() > 10000);
    QVERIFY(!m_window->exportReport(id + 1000, out.filePath(QStringLiteral("none.html"))).isEmpty());

    // File → Export trained model writes the model the run ended with (the
    // run folder keeps it; a built-in model comes as TorchScript and as a
    // state_dict), checked against the SHA-256 the run recorded.
    const QCborMap info = run->session().data().finalModelInfo();
    QCOMPARE(info.value("format").toString(), QStringLiteral("torchscript"));
    const std::pair<core::ModelFile, const char *> files[] = {{core::ModelFile::TorchScript, "sha256"},
                                                              {core::ModelFile::StateDict, "state_dict_sha256"}};
    for (const auto &[which, hashKey] : files) {
        const QString model = out.filePath(QStringLiteral("model-%1.pt").arg(hashKey));
        const QString modelError = m_window->exportModel(id, which, model);
        QVERIFY2(modelError.isEmpty(), qPrintable(modelError));
        QFile exported(model);
        QVERIFY(exported.open(QIODevice::ReadOnly));
        QCOMPARE(QCryptographicHash::hash(exported.readAll(), QCryptographicHash::Sha256).toHex(),
                 info.value(QLatin1String(hashKey)).toString().toLatin1());
    }
}

void TestStudioGui::darkPaletteRethemesThePlots()
{
    // What a dark platform theme does: a new application palette.
    const QPalette light = qApp->palette();
    QPalette dark;
    dark.setColor(QPalette::Window, QColor(37, 38, 41));
    dark.setColor(QPalette::WindowText, QColor(225, 225, 225));
    dark.setColor(QPalette::Base, QColor(28, 29, 31));
    dark.setColor(QPalette::AlternateBase, QColor(45, 46, 50));
    dark.setColor(QPalette::Text, QColor(225, 225, 225));
    dark.setColor(QPalette::Button, QColor(50, 52, 56));
    dark.setColor(QPalette::ButtonText, QColor(225, 225, 225));
    dark.setColor(QPalette::Highlight, QColor(63, 127, 209));
    ui::Dashboard *dash = m_window->dashboard();
    dash->refresh();  // the run has ended: pull its last telemetry first
    const qsizetype points = dash->pointCount();
    qApp->setPalette(dark);
    QTRY_COMPARE_WITH_TIMEOUT(dash->plots().first()->xAxis->basePen().color(), QColor(225, 225, 225), 5000);
    // The curves are redrawn from the model, point for point, and none is lost
    // (telemetry still in flight when `points` was read may add a few).
    QTRY_COMPARE_WITH_TIMEOUT(dash->pointCount(), dash->heldPointCount(), 5000);
    QVERIFY(dash->pointCount() >= points);
    m_window->showPage(ui::MainWindow::Page::Dashboard);
    screenshot(QStringLiteral("dashboard-dark"));
    qApp->setPalette(light);
}

void TestStudioGui::lostWorkerRegroupsAndRestarts()
{
    setUp();
    click(m_window->startAction());
    ui::RunController *run = m_window->controller();
    const core::RunSession &session = run->session();
    QTRY_VERIFY_WITH_TIMEOUT(run->phase() == Phase::Running && m_window->workerList()->state(2) == protocol::WorkerState::Running, 60000);
    QTRY_VERIFY_WITH_TIMEOUT(run->localCluster() && session.data().rounds(2).size() > 5, 60000);
    run->localCluster()->kill(2);
    QTRY_VERIFY_WITH_TIMEOUT(m_window->workerList()->state(2) == protocol::WorkerState::Lost, 30000);
    // The others regroup without it and train on; the run does not fail.
    QTRY_COMPARE_WITH_TIMEOUT(session.members(), (QList<int>{0, 1}), 30000);
    const qint64 roundAtLoss = session.data().lastRound(0)->round;
    auto log = [this] { return m_window->findChild<QPlainTextEdit *>(QStringLiteral("log"))->toPlainText(); };
    QTRY_VERIFY2_WITH_TIMEOUT(session.data().lastRound(0)->round > roundAtLoss + 5, qPrintable(log()), 60000);
    QCOMPARE(run->phase(), Phase::Running);
    QVERIFY2(log().contains("Group generation 1: workers 0, 1 train together"), qPrintable(log()));
    screenshot(QStringLiteral("dashboard-lost-worker"));

    // Restart is offered for the lost worker only.
    m_window->workerList()->setCurrentItem(m_window->workerList()->topLevelItem(1));
    QVERIFY(!m_window->restartWorkerAction()->isEnabled());
    m_window->workerList()->setCurrentItem(m_window->workerList()->topLevelItem(2));
    QTRY_VERIFY_WITH_TIMEOUT(m_window->restartWorkerAction()->isEnabled(), 5000);
    click(m_window->restartWorkerAction());
    QTRY_COMPARE_WITH_TIMEOUT(session.members(), (QList<int>{0, 1, 2}), 30000);
    QCOMPARE(session.generation(), 2);
    QTRY_VERIFY_WITH_TIMEOUT(m_window->workerList()->state(2) == protocol::WorkerState::Running, 30000);
    const qsizetype before = session.data().rounds(2).size();
    QTRY_VERIFY_WITH_TIMEOUT(session.data().rounds(2).size() > before + 5, 60000);
    QVERIFY(!m_window->restartWorkerAction()->isEnabled());

    click(m_window->stopAction());
    QTRY_VERIFY_WITH_TIMEOUT(run->phase() == Phase::Finished || run->phase() == Phase::Failed, 60000);
    QVERIFY2(run->phase() == Phase::Finished, qPrintable(m_window->statusText()));
    QTRY_VERIFY_WITH_TIMEOUT(m_window->startAction()->isEnabled(), 5000);
}

void TestStudioGui::closedWindowLeavesTheRunToTakeOver()
{
    auto log = [this] { return m_window->findChild<QPlainTextEdit *>(QStringLiteral("log"))->toPlainText(); };
    // A folder without attach.json: a clear refusal, and the window stays usable.
    QTemporaryDir empty;
    m_window->attachToRun(empty.path());
    QCOMPARE(m_window->controller()->phase(), Phase::Failed);
    QVERIFY2(log().contains("attach.json is missing"), qPrintable(log()));
    QVERIFY(m_window->startAction()->isEnabled());

    setUp();
    typeInto(child<QSpinBox>("grace"), QStringLiteral("60"));
    click(m_window->startAction());
    ui::RunController *run = m_window->controller();
    QTRY_VERIFY_WITH_TIMEOUT(run->phase() == Phase::Running && run->session().data().rounds(0).size() > 5, 60000);
    const QString dir = run->runDir();
    QTRY_VERIFY_WITH_TIMEOUT(QFile::exists(core::AttachFile::pathIn(dir)), 5000);
    QCOMPARE(core::findAttachableRuns(core::RunStore::defaultRunsDir()).value(0).runDir, dir);
    const qint64 id = run->recordedRunId();
    QList<qint64> agents;
    for (int w = 0; w < 3; ++w)
        agents << run->localCluster()->pid(w);

    // Closing asks; the user leaves the run training.
    QTimer answer;
    connect(&answer, &QTimer::timeout, this, [&answer] {
        auto *box = qobject_cast<QMessageBox *>(QApplication::activeModalWidget());
        if (!box)
            return;
        answer.stop();
        for (QAbstractButton *b : box->buttons()) {
            if (b->text() == QLatin1String("&Leave it training"))
                b->click();
        }
    });
    answer.start(50);
    QVERIFY(m_window->close());
    const qint64 leftAt = run->session().data().lastRound(0)->round;
    m_window.reset();
    for (qint64 pid : agents)
        QVERIFY2(test::alive(pid), "an agent of a run left training has exited");
    QVERIFY(QFile::exists(core::AttachFile::pathIn(dir)));

    // A new window offers it and takes it over: the same stored run goes on.
    m_window = std::make_unique<ui::MainWindow>();
    m_window->resize(1600, 1000);
    m_window->show();
    QVERIFY2(log().contains("may still be training without a control center"), qPrintable(log()));
    QVERIFY(m_window->attachAction()->isEnabled());
    m_window->attachToRun(dir);
    run = m_window->controller();
    QCOMPARE(run->phase(), Phase::Running);
    QCOMPARE(run->recordedRunId(), id);
    QTRY_VERIFY2_WITH_TIMEOUT(run->session().state() == core::RunSession::State::Running, qPrintable(log()), 30000);
    // It shows what was recorded before, then what the agents trained since.
    QVERIFY(run->session().data().rounds(0).size() > 5);
    QTRY_VERIFY_WITH_TIMEOUT(run->session().data().lastRound(0)->round > leftAt + 5, 60000);
    QTRY_VERIFY_WITH_TIMEOUT(m_window->dashboard()->model().series(core::TelemetryModel::Metric::Accuracy, 0).size() >= 3, 30000);
    screenshot(QStringLiteral("dashboard-taken-over"));

    click(m_window->stopAction());
    QTRY_VERIFY_WITH_TIMEOUT(run->phase() == Phase::Finished || run->phase() == Phase::Failed, 60000);
    QVERIFY2(run->phase() == Phase::Finished, qPrintable(log()));
    QVERIFY(!QFile::exists(core::AttachFile::pathIn(dir)));
    ui::RunListDialog runs(run->storePath());
    QVERIFY(runs.reload() >= 1);
    QCOMPARE(runs.table()->item(0, 0)->text(), QStringLiteral("#%1").arg(id));
    QCOMPARE(runs.table()->item(0, 2)->text(), QStringLiteral("finished"));
    for (qint64 pid : agents)
        QTRY_VERIFY_WITH_TIMEOUT(!test::alive(pid), 30000);
}

namespace {

// Everything a stored run keeps about its job, cluster and records, less
// what timing decides (times, rates, losses, how many evaluations).
void compareStoredRuns(const core::StoredRun &gui, const core::StoredRun &cli)
{
    for (const core::StoredRun *run : {&gui, &cli}) {
        QCOMPARE(run->info.status, QStringLiteral("finished"));
        QVERIFY2(QFile::exists(QDir(run->info.outDir).filePath(QStringLiteral("summary.json"))), qPrintable(run->info.outDir));
        QVERIFY(std::any_of(run->data.evals().cbegin(), run->data.evals().cend(),
                            [](const protocol::EvalRecord &e) { return e.final; }));
    }
    QCOMPARE(gui.info.spec, cli.info.spec);
    QCOMPARE(gui.info.cluster, cli.info.cluster);
    QCOMPARE(gui.info.cluster.value("kind").toString(), QStringLiteral("local"));
    QCOMPARE(gui.info.strategy, cli.info.strategy);
    QCOMPARE(gui.info.model, cli.info.model);
    QCOMPARE(gui.info.dataset, cli.info.dataset);
    QCOMPARE(gui.info.workers, cli.info.workers);
    QCOMPARE(gui.info.host, cli.info.host);
    QCOMPARE(gui.data.workers(), cli.data.workers());
    QCOMPARE(gui.data.merges().size(), cli.data.merges().size());
    for (int w = 0; w < gui.data.workers(); ++w) {
        const auto &a = gui.data.rounds(w), &b = cli.data.rounds(w);
        QCOMPARE(a.size(), b.size());
        for (qsizetype i = 0; i < a.size(); ++i) {
            QCOMPARE(a[i].round, b[i].round);
            QCOMPARE(a[i].batch, b[i].batch);
        }
        QCOMPARE(gui.data.outcome(w).keys(), cli.data.outcome(w).keys());
    }
}

} // namespace

void TestStudioGui::guiAndCliStoreTheSameRun()
{
    QTemporaryDir dir;
    const QString jobFile = dir.filePath(QStringLiteral("job.json"));
    QFile f(jobFile);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write(R"({"workers": 2, "strategy": "allreduce", "dataset": "synthetic", "model": "mlp",
                "budget": {"max_rounds": 40}, "eval_interval_s": 1, "seed": 7})");
    f.close();
    QString error;
    const auto request = core::buildJob(jobFile, {}, &error);
    QVERIFY2(request, qPrintable(error));

    ui::RunController gui;
    gui.startLocal(*request);
    QTRY_VERIFY_WITH_TIMEOUT(gui.phase() == Phase::Finished || gui.phase() == Phase::Failed, 120000);
    QCOMPARE(gui.phase(), Phase::Finished);

    QProcess cli;
    cli.start(qEnvironmentVariable("DLION_CLI"), {"run", "--config", jobFile, "--out", dir.filePath("cli"), "--quiet"});
    QVERIFY(cli.waitForFinished(120000));
    const QByteArray said = cli.readAllStandardOutput();
    QVERIFY2(cli.exitCode() == 0, (said + cli.readAllStandardError()).constData());
    static const QRegularExpression runId(QStringLiteral("run id: (\\d+) in (.*) \\(dlion report"));
    const QRegularExpressionMatch m = runId.match(QString::fromUtf8(said));
    QVERIFY2(m.hasMatch(), said.constData());
    QCOMPARE(m.captured(2), gui.storePath());

    core::RunStore store;
    QVERIFY2(store.open(gui.storePath(), core::RunStore::Mode::ReadOnly), qPrintable(store.errorString()));
    const auto fromGui = store.loadRun(gui.recordedRunId());
    const auto fromCli = store.loadRun(m.captured(1).toLongLong());
    QVERIFY2(fromGui && fromCli, qPrintable(store.errorString()));
    compareStoredRuns(*fromGui, *fromCli);
}

void TestStudioGui::cleanupTestCase()
{
    m_window->close();
    m_window.reset();
}

QTEST_MAIN(TestStudioGui)
#include "tst_studio_gui.moc"
