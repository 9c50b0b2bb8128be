#include "main_window.h"

#include <dlion_version.h>
#include "cluster_page.h"
#include "dashboard.h"
#include "hosts_form.h"
#include "job_editor.h"
#include "live_controls.h"
#include "local_cluster_form.h"
#include <attach_file.h>
#include <host_probe.h>
#include <preset_store.h>
#include <model_export.h>
#include <report_writer.h>
#include "run_list_dialog.h"
#include "studio_resources.h"
#include "ui_log.h"
#include "worker_status_list.h"

#include <QAction>
#include <QApplication>
#include <QCloseEvent>
#include <QDockWidget>
#include <QFileDialog>
#include <QInputDialog>
#include <QJsonArray>
#include <QJsonDocument>
#include <QLabel>
#include <QMenuBar>
#include <QMessageBox>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QRegularExpression>
#include <QScrollArea>
#include <QSettings>
#include <QStatusBar>
#include <QTabWidget>
#include <QTime>
#include <QTimer>
#include <QToolBar>
#include <QVBoxLayout>

namespace dlion::ui {

namespace {

QIcon icon(const char *name)
{
    return QIcon(QStringLiteral(":/icons/%1.svg").arg(QLatin1String(name)));
}

constexpr int kMergeConfirmMs = 15000;

// The field a job error names: `field "budget.seconds" ...` -> budget.seconds.
QString fieldOf(const QString &error)
{
    static const QRegularExpression re(QStringLiteral("field \"([^\"]+)\""));
    const auto m = re.match(error);
    return m.hasMatch() ? m.captured(1) : QString();
}

} // namespace

MainWindow::MainWindow(QWidget *parent)
    : QMainWindow(parent), m_tabs(new QTabWidget(this)), m_cluster(new ClusterPage(this)), m_job(new JobEditor(this)),
      m_dashboard(new Dashboard(this)), m_workers(new WorkerStatusList(this)), m_live(new LiveControls(this)),
      m_log(new QPlainTextEdit(this)),
      m_probe(new core::HostProbe([this](const QString &h, const QString &f) { return askHostKey(h, f); },
                            [this](const QString &h) { return askPassword(h); }, this)),
      m_banner(new QLabel(this)), m_phaseLabel(new QLabel(tr("Idle"), this)),
      m_statsLabel(new QLabel(this)), m_mergeTimeout(new QTimer(this))
{
    initStudioResources();
    setObjectName(QStringLiteral("mainWindow"));
    setWindowTitle(tr("DLion Studio"));
    setWindowIcon(icon("dlion-studio"));
    setUnifiedTitleAndToolBarOnMac(true);

    m_tabs->setDocumentMode(true);
    m_tabs->addTab(m_cluster, icon("cluster"), tr("&Cluster"));
    m_tabs->addTab(buildJobPage(), icon("job"), tr("&Job"));
    m_tabs->addTab(m_dashboard, icon("dashboard"), tr("&Dashboard"));
    m_tabs->setTabToolTip(0, tr("Where training runs (Ctrl+1)"));
    m_tabs->setTabToolTip(1, tr("What to train and how (Ctrl+2)"));
    m_tabs->setTabToolTip(2, tr("Live view of the run (Ctrl+3)"));
    m_banner->setObjectName(QStringLiteral("validationBanner"));
    m_banner->setWordWrap(true);
    m_banner->setContentsMargins(10, 6, 10, 6);
    m_banner->setStyleSheet(QStringLiteral("QLabel#validationBanner { background: rgba(208,70,59,40); "
                                           "border: 1px solid #d0463b; border-radius: 4px; }"));
    auto *central = new QWidget(this);
    auto *layout = new QVBoxLayout(central);
    layout->setContentsMargins(8, 8, 8, 8);
    layout->setSpacing(8);
    layout->addWidget(m_banner);
    layout->addWidget(m_tabs, 1);
    setCentralWidget(central);

    buildActions();
    buildDocks();
    statusBar()->addWidget(m_phaseLabel);
    statusBar()->addPermanentWidget(m_statsLabel);

    core::RunSession &session = m_controller.session();
    connect(&session, &core::RunSession::workerStateChanged, m_workers, &WorkerStatusList::setState);
    connect(&session, &core::RunSession::workerStateChanged, this, &MainWindow::updateActions);
    connect(m_workers, &QTreeWidget::itemSelectionChanged, this, &MainWindow::updateActions);
    connect(&session, &core::RunSession::groupChanged, this, [this](int generation, const QList<int> &members) {
        QStringList ids;
        for (int w : members)
            ids << QString::number(w);
        log(tr("Group generation %1: workers %2 train together").arg(generation).arg(ids.join(QStringLiteral(", "))));
    });
    connect(&session, &core::RunSession::heartbeat, m_workers, &WorkerStatusList::noteHeartbeat);
    connect(&session, &core::RunSession::mergeObserved, this, &MainWindow::onMerge);
    connect(&m_controller, &RunController::message, this, &MainWindow::log);
    connect(&m_controller, &RunController::phaseChanged, this, &MainWindow::onPhaseChanged);
    connect(m_live, &LiveControls::slowdownRequested, this, [this](int worker, double factor) {
        m_controller.session().setSlowdown(worker, factor);
        log(tr("worker %1: compute slowdown set to %2×").arg(worker).arg(factor));
    });
    connect(m_live, &LiveControls::linkCapRequested, this, [this](int from, int to, double mbps) {
        m_controller.session().setLinkCap(from, to, mbps);
        m_dashboard->setLinkCap(from, to, mbps);
        log(mbps > 0 ? tr("link %1 → %2: cap set to %3 Mbit/s").arg(from).arg(to).arg(mbps)
                     : tr("link %1 → %2: uncapped").arg(from).arg(to));
    });
    connectMachines();
    connect(m_cluster, &ClusterPage::changed, this, &MainWindow::validate);
    connect(m_job, &JobEditor::changed, this, &MainWindow::validate);

    // The engine reports a merge only when some worker is behind the best
    // one; say so if none comes back instead of waiting forever.
    m_mergeTimeout->setSingleShot(true);
    m_mergeTimeout->setInterval(kMergeConfirmMs);
    connect(m_mergeTimeout, &QTimer::timeout, this, [this] {
        if (!m_mergePending)
            return;
        m_mergePending = false;
        log(tr("No merge event came back within %1 s: no worker was behind the best one, so nothing was merged.")
                .arg(kMergeConfirmMs / 1000));
    });

    auto *statusTimer = new QTimer(this);
    connect(statusTimer, &QTimer::timeout, this, &MainWindow::updateStatus);
    statusTimer->start(500);

    restoreSettings();
    validate();
    updateActions();
    if (const qsizetype n = core::findAttachableRuns(core::RunStore::defaultRunsDir()).size())
        log(tr("%n run(s) may still be training without a control center: File → Attach to run takes one over.", nullptr, int(n)));
}

MainWindow::~MainWindow() = default;

QWidget *MainWindow::buildJobPage()
{
    auto *scroll = new QScrollArea(this);
    scroll->setWidgetResizable(true);
    scroll->setFrameShape(QFrame::NoFrame);
    auto *inner = new QWidget(scroll);
    auto *layout = new QVBoxLayout(inner);
    layout->setContentsMargins(12, 12, 12, 12);
    layout->addWidget(m_job);
    layout->addStretch(1);
    scroll->setWidget(inner);
    return scroll;
}

void MainWindow::buildActions()
{
    m_start = new QAction(icon("start"), tr("&Start"), this);
    m_start->setShortcut(Qt::Key_F5);
    m_pause = new QAction(icon("pause"), tr("&Pause"), this);
    m_pause->setShortcut(Qt::Key_F6);
    m_pause->setCheckable(true);
    m_stop = new QAction(icon("stop"), tr("S&top"), this);
    m_stop->setShortcut(Qt::SHIFT | Qt::Key_F5);
    m_merge = new QAction(icon("merge"), tr("&Merge now"), this);
    m_merge->setShortcut(Qt::CTRL | Qt::Key_M);
    m_start->setToolTip(tr("Start the run (F5)"));
    m_pause->setToolTip(tr("Pause or resume every worker (F6)"));
    m_stop->setToolTip(tr("Stop the run; workers finish their round and report (Shift+F5)"));
    m_restartWorker = new QAction(icon("start"), tr("Restart &worker"), this);
    m_restartWorker->setToolTip(tr("Restart the selected lost worker's local agent; it rejoins with the best worker's model"));
    connect(m_restartWorker, &QAction::triggered, this, [this] { m_controller.restartWorker(m_workers->selectedWorker()); });
    m_merge->setToolTip(tr("Knowledge transfer now: merge the best worker's model into the others (Ctrl+M)"));
    connect(m_start, &QAction::triggered, this, &MainWindow::start);
    connect(m_stop, &QAction::triggered, &m_controller, &RunController::stop);
    connect(m_merge, &QAction::triggered, this, &MainWindow::mergeNow);
    connect(m_pause, &QAction::toggled, this, [this](bool paused) {
        paused ? m_controller.pause() : m_controller.resume();
        m_pause->setText(paused ? tr("&Resume") : tr("&Pause"));
        m_pause->setIcon(icon(paused ? "start" : "pause"));
        log(paused ? tr("Pausing every worker…") : tr("Resuming…"));
    });

    auto *savePresetAction = new QAction(icon("save"), tr("&Save preset…"), this);
    savePresetAction->setShortcut(QKeySequence::Save);
    connect(savePresetAction, &QAction::triggered, this, &MainWindow::savePreset);
    auto *loadPresetAction = new QAction(icon("open"), tr("&Load preset…"), this);
    loadPresetAction->setShortcut(QKeySequence::Open);
    connect(loadPresetAction, &QAction::triggered, this, &MainWindow::loadPreset);
    auto *runs = new QAction(icon("job"), tr("&Runs…"), this);
    runs->setShortcut(Qt::CTRL | Qt::Key_R);
    runs->setToolTip(tr("Runs recorded in the run store"));
    connect(runs, &QAction::triggered, this, [this] {
        RunListDialog dialog(core::RunStore::defaultPath(), this);
        connect(&dialog, &RunListDialog::exportRequested, this, &MainWindow::exportReportInteractively);
        dialog.exec();
    });
    auto *exportAction = new QAction(icon("export"), tr("&Export report…"), this);
    exportAction->setShortcut(Qt::CTRL | Qt::Key_E);
    exportAction->setToolTip(tr("Report of the current or last run (HTML, PDF, JSON or CSV)"));
    connect(exportAction, &QAction::triggered, this, [this] {
        if (m_controller.recordedRunId() <= 0)
            return void(QMessageBox::information(this, tr("Nothing to export"),
                                                 tr("No run recorded in this session yet. Use File → Runs to export an earlier one.")));
        exportReportInteractively(m_controller.recordedRunId());
    });
    auto *exportModel = new QAction(icon("export"), tr("Export trained &model…"), this);
    exportModel->setToolTip(tr("The final model of the current or last run, for PyTorch"));
    connect(exportModel, &QAction::triggered, this, [this] {
        if (m_controller.recordedRunId() <= 0)
            return void(QMessageBox::information(this, tr("Nothing to export"), tr("No run recorded in this session yet.")));
        exportModelInteractively(m_controller.recordedRunId());
    });
    m_attach = new QAction(icon("start"), tr("&Attach to run…"), this);
    m_attach->setToolTip(tr("Take over a run that trains on after its control center closed or crashed"));
    connect(m_attach, &QAction::triggered, this, &MainWindow::chooseRunToAttach);
    auto *quit = new QAction(tr("&Quit"), this);
    quit->setShortcut(QKeySequence::Quit);
    connect(quit, &QAction::triggered, this, &QWidget::close);

    QMenu *file = menuBar()->addMenu(tr("&File"));
    file->addAction(loadPresetAction);
    file->addAction(savePresetAction);
    file->addSeparator();
    file->addAction(runs);
    file->addAction(m_attach);
    file->addAction(exportAction);
    file->addAction(exportModel);
    file->addSeparator();
    file->addAction(quit);
    QMenu *run = menuBar()->addMenu(tr("&Run"));
    for (QAction *a : {m_start, m_pause, m_stop, m_merge, m_restartWorker})
        run->addAction(a);
    QMenu *view = m_viewMenu = menuBar()->addMenu(tr("&View"));
    const QList<std::pair<QString, Page>> pages = {{tr("&Cluster"), Page::Cluster}, {tr("&Job"), Page::Job},
                                                   {tr("&Dashboard"), Page::Dashboard}};
    for (int i = 0; i < pages.size(); ++i) {
        QAction *a = view->addAction(pages[i].first, this, [this, p = pages[i].second] { showPage(p); });
        a->setShortcut(QKeySequence(Qt::CTRL | Qt::Key(Qt::Key_1 + i)));
    }
    view->addSeparator();
    QMenu *help = menuBar()->addMenu(tr("&Help"));
    help->addAction(tr("&About DLion Studio"), this, [this] {
        QMessageBox::about(this, tr("About DLion Studio"),
                           tr("<b>DLion Studio %1</b><br>Decentralized deep-learning training on micro-clouds: "
                              "weighted dynamic batching, per-link prioritized gradient exchange and direct "
                              "knowledge transfer (Hong &amp; Chandra, HPDC 2021).")
                               .arg(QStringLiteral(DLION_VERSION)));
    });

    QToolBar *bar = addToolBar(tr("Run"));
    bar->setObjectName(QStringLiteral("runToolBar"));
    bar->setToolButtonStyle(Qt::ToolButtonTextBesideIcon);
    bar->setIconSize(QSize(20, 20));
    for (QAction *a : {m_start, m_pause, m_stop})
        bar->addAction(a);
    bar->addSeparator();
    bar->addAction(m_merge);
    bar->addAction(m_restartWorker);
}

void MainWindow::buildDocks()
{
    auto *workersDock = new QDockWidget(tr("Workers"), this);
    workersDock->setObjectName(QStringLiteral("workersDock"));
    auto *panel = new QWidget(workersDock);
    auto *layout = new QVBoxLayout(panel);
    layout->setContentsMargins(4, 4, 4, 4);
    layout->addWidget(m_workers, 1);
    m_workers->setContextMenuPolicy(Qt::ActionsContextMenu);
    m_workers->addAction(m_restartWorker);
    layout->addWidget(m_live);
    workersDock->setWidget(panel);
    addDockWidget(Qt::RightDockWidgetArea, workersDock);

    auto *logDock = new QDockWidget(tr("Log"), this);
    logDock->setObjectName(QStringLiteral("logDock"));
    m_log->setReadOnly(true);
    m_log->setMaximumBlockCount(5000);
    m_log->setObjectName(QStringLiteral("log"));
    logDock->setWidget(m_log);
    addDockWidget(Qt::BottomDockWidgetArea, logDock);
    resizeDocks({logDock}, {120}, Qt::Vertical);
    resizeDocks({workersDock}, {480}, Qt::Horizontal);

    QAction *toggleWorkers = workersDock->toggleViewAction();
    toggleWorkers->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_W));
    QAction *toggleLog = logDock->toggleViewAction();
    toggleLog->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_L));
    m_viewMenu->addAction(toggleWorkers);
    m_viewMenu->addAction(toggleLog);
}

void MainWindow::showPage(Page page)
{
    m_tabs->setCurrentIndex(int(page));
}

std::optional<core::JobRequest> MainWindow::validate()
{
    LocalClusterForm *local = m_cluster->localForm();
    m_job->clearMarks();
    local->clearMarks();
    QStringList problems;
    QJsonObject overrides = m_job->job();
    if (m_cluster->mode() == ClusterPage::Mode::Local) {
        QJsonArray slowdown;
        for (double f : local->slowdown())
            slowdown.append(f);
        overrides.insert("workers", local->workers());
        overrides.insert("slowdown", slowdown);
        overrides.insert("emulation", local->emulation());
        problems << local->validate();
    } else {
        QString clusterError;
        const auto cluster = clusterSpec(&clusterError);
        if (m_cluster->hostsForm()->hosts().isEmpty())
            problems << tr("Add at least one machine to the hosts table, or choose \"This computer\".");
        else if (!cluster)
            problems << clusterError;
        // Hosts that name their own data train on it.
        if (cluster && cluster->jobOverrides().contains("worker_data"))
            overrides.insert("worker_data", cluster->jobOverrides().value("worker_data"));
        overrides.insert("workers", qMax(1, int(m_cluster->hostsForm()->hosts().size())));
    }
    problems << m_job->validate();
    QString error;
    auto request = core::buildJob(QString(), overrides, &error);
    if (!request) {
        const QString field = fieldOf(error);
        if (!m_job->markField(field, error))
            local->markField(field, error);
        problems << error;
    }
    problems.removeAll(QString());
    m_problem = problems.value(0);
    m_banner->setText(m_problem.isEmpty() ? QString() : tr("Cannot start yet: %1").arg(m_problem));
    m_banner->setVisible(!m_problem.isEmpty());
    updateActions();
    if (!m_problem.isEmpty())
        return std::nullopt;
    return request;
}

std::optional<core::JobRequest> MainWindow::beginRun(const QString &where)
{
    if (m_controller.isActive())
        return std::nullopt;
    auto request = validate();
    if (!request) {
        log(tr("Not started: %1").arg(m_problem));
        return std::nullopt;
    }
    const bool local = m_cluster->mode() == ClusterPage::Mode::Local;
    resetViews(request->workers, local ? m_cluster->localForm()->capMatrix() : QList<QList<double>>());
    log(tr("Starting a %1 run on %2 %3 workers (%4 on %5).")
            .arg(request->spec.strategy)
            .arg(request->workers)
            .arg(where)
            .arg(request->spec.model, request->spec.dataset));
    return request;
}

void MainWindow::start()
{
    const bool local = m_cluster->mode() == ClusterPage::Mode::Local;
    const auto request = beginRun(local ? tr("local") : tr("remote"));
    if (!request)
        return;
    if (local) {
        m_controller.startLocal(*request, m_cluster->localForm()->graceS());
    } else {
        QString error;
        m_controller.startRemote(*request, *clusterSpec(&error));
    }
    showPage(Page::Dashboard);
}

void MainWindow::startOnAgents(const QList<core::AgentEndpoint> &agents, const QByteArray &secret)
{
    const auto request = beginRun(tr("hand-started"));
    if (!request)
        return;
    m_controller.startOnAgents(*request, agents, secret);
    showPage(Page::Dashboard);
}

void MainWindow::resetViews(int workers, const QList<QList<double>> &caps)
{
    m_dashboard->reset(workers, caps);
    m_dashboard->attach(&m_controller.session().data());
    m_workers->reset(workers);
    m_live->setWorkers(workers);
    m_pause->setChecked(false);
    m_mergePending = false;
}

void MainWindow::attachToRun(const QString &runDir)
{
    if (m_controller.isActive())
        return;
    m_controller.attachTo(runDir);
    if (m_controller.phase() != RunController::Phase::Running)
        return;  // the controller logged why
    resetViews(m_controller.request().workers, {});
    showPage(Page::Dashboard);
}

void MainWindow::chooseRunToAttach()
{
    const QList<core::AttachableRun> found = core::findAttachableRuns(core::RunStore::defaultRunsDir());
    QStringList items;
    for (const core::AttachableRun &f : found)
        items << tr("Run %1: %2 workers, group changed %3 (%4)")
                     .arg(f.file.runId)
                     .arg(f.file.agents.size())
                     .arg(QLocale().toString(f.updated, QLocale::ShortFormat), f.runDir);
    const QString other = tr("Another folder…");
    items << other;
    bool ok = true;
    const QString choice = found.isEmpty()
        ? other
        : QInputDialog::getItem(this, tr("Attach to run"), tr("Runs training without a control center:"), items, 0, false, &ok);
    if (!ok)
        return;
    const qsizetype i = items.indexOf(choice);
    const QString dir = i < found.size()
        ? found[i].runDir
        : QFileDialog::getExistingDirectory(this, tr("Folder of the run to take over (it holds attach.json)"),
                                            core::RunStore::defaultRunsDir());
    if (!dir.isEmpty())
        attachToRun(dir);
}

std::optional<core::ClusterSpec> MainWindow::clusterSpec(QString *error) const
{
    return core::ClusterSpec::fromJson(m_cluster->hostsForm()->clusterJson(), error);
}

void MainWindow::connectMachines()
{
    HostsForm *hosts = m_cluster->hostsForm();
    hosts->setDeployAvailable(true, QString());
    auto status = [hosts](const QString &host, HostsForm::Status s, const QString &text) {
        hosts->setStatus(hosts->rowOf(host), s, text);
    };
    connect(hosts, &HostsForm::testRequested, this, [this, hosts](int row) {
        QString error;
        const auto spec = clusterSpec(&error);
        if (!spec)
            return hosts->setStatus(row, HostsForm::Status::Error, error);
        hosts->setStatus(row, HostsForm::Status::Busy, tr("Connecting…"));
        m_probe->probe(spec->hosts[row], spec->knownHosts, spec->connectTimeoutS);
    });
    connect(m_probe, &core::HostProbe::finished, this, [this, status](const QString &host, bool ok, const QString &text) {
        status(host, ok ? HostsForm::Status::Ok : HostsForm::Status::Error, text);
        log(tr("%1: %2").arg(host, text));
    });
    connect(hosts, &HostsForm::deployRequested, this, [this, hosts] {
        QString error;
        const auto spec = clusterSpec(&error);
        if (!spec)
            return void(QMessageBox::warning(this, tr("Cannot deploy"), error));
        for (int row = 0; row < spec->hosts.size(); ++row)
            hosts->setStatus(row, HostsForm::Status::Busy, tr("Waiting…"));
        m_controller.checkDeployment(*spec);
    });
    connect(&m_controller, &RunController::hostProgress, this,
            [status](const QString &host, const QString &stage, const QString &text) {
                status(host, HostsForm::Status::Busy, tr("%1: %2").arg(stage, text));
            });
    connect(&m_controller, &RunController::hostFailed, this, [this, status](const QString &host, const QString &reason) {
        status(host, HostsForm::Status::Error, reason);
        log(tr("%1: %2").arg(host, reason));
    });
    connect(&m_controller, &RunController::deploymentChecked, this, [this, hosts](bool ok, const QString &text) {
        for (int row = 0; row < hosts->hosts().size(); ++row) {
            if (ok || hosts->status(row) == HostsForm::Status::Busy)
                hosts->setStatus(row, ok ? HostsForm::Status::Ok : HostsForm::Status::Unknown,
                                 ok ? tr("Deployed and answered") : tr("Not checked: %1").arg(text));
        }
        log(ok ? text : tr("Deployment check failed: %1").arg(text));
    });
    connect(&m_controller, &RunController::hostKeyQuestion, this, [this](const QString &host, const QString &fingerprint) {
        m_controller.answerHostKey(host, askHostKey(host, fingerprint));
    });
    connect(&m_controller, &RunController::passwordQuestion, this, [this](const QString &host) {
        m_controller.answerPassword(host, QString::fromUtf8(askPassword(host).value_or(QByteArray())));
    });
}

bool MainWindow::askHostKey(const QString &host, const QString &fingerprint)
{
    QMessageBox box(QMessageBox::Question, tr("Unknown host key"),
                    tr("The machine <b>%1</b> is not in your known hosts file yet.").arg(host.toHtmlEscaped()),
                    QMessageBox::Yes | QMessageBox::No, this);
    box.setInformativeText(tr("Its host key fingerprint is:<br><tt>%1</tt><br><br>Compare it with the one the "
                              "machine's administrator gives you. Trust this key and record it?")
                               .arg(fingerprint.toHtmlEscaped()));
    box.setDefaultButton(QMessageBox::No);
    box.setTextInteractionFlags(Qt::TextSelectableByMouse);
    return box.exec() == QMessageBox::Yes;
}

std::optional<QByteArray> MainWindow::askPassword(const QString &host)
{
    bool ok = false;
    const QString password = QInputDialog::getText(this, tr("Password"), tr("Password for %1:").arg(host),
                                                   QLineEdit::Password, QString(), &ok);
    if (!ok)
        return std::nullopt;
    return password.toUtf8();
}

void MainWindow::mergeNow()
{
    if (m_controller.phase() != RunController::Phase::Running)
        return;
    m_mergePending = true;
    m_controller.session().mergeNow();
    m_mergeTimeout->start();
    m_phaseLabel->setText(tr("Merge requested…"));
    log(tr("Merge now: asking the workers to merge the best model into the others…"));
}

void MainWindow::onMerge(const protocol::MergeEvent &e)
{
    const QString text = tr("%1merge at %2 s (round %3): worker %4 (%5 % accuracy) → worker %6 (%7 %), α = %8")
                             .arg(e.manual ? tr("manual ") : QString())
                             .arg(e.t, 0, 'f', 1)
                             .arg(e.round)
                             .arg(e.from)
                             .arg(100.0 * e.scoreFrom, 0, 'f', 1)
                             .arg(e.to)
                             .arg(100.0 * e.scoreBefore, 0, 'f', 1)
                             .arg(e.alpha, 0, 'f', 2);
    log(text);
    if (e.manual && m_mergePending) {
        m_mergePending = false;
        statusBar()->showMessage(tr("Merge done: %1").arg(text), 8000);
    }
}

void MainWindow::onPhaseChanged(RunController::Phase phase)
{
    if (phase == RunController::Phase::Finished || phase == RunController::Phase::Failed) {
        const QSignalBlocker block(m_pause);
        m_pause->setChecked(false);
        m_pause->setText(tr("&Pause"));
        m_pause->setIcon(icon("pause"));
    }
    updateActions();
    updateStatus();
}

void MainWindow::updateActions()
{
    const auto phase = m_controller.phase();
    const bool running = phase == RunController::Phase::Running;
    m_start->setEnabled(!m_controller.isActive() && m_problem.isEmpty());
    m_attach->setEnabled(!m_controller.isActive());
    m_pause->setEnabled(running);
    m_stop->setEnabled(running || phase == RunController::Phase::StartingAgents);
    m_merge->setEnabled(running);
    m_restartWorker->setEnabled(m_controller.canRestartWorker(m_workers->selectedWorker()));
    m_live->setEnabled(running);
    m_cluster->setEnabled(!m_controller.isActive());
    m_job->setEnabled(!m_controller.isActive());
}

QString MainWindow::statusText() const
{
    return m_phaseLabel->text();
}

void MainWindow::updateStatus()
{
    static const char *names[] = {QT_TR_NOOP("Idle"), QT_TR_NOOP("Starting agents…"), QT_TR_NOOP("Running"),
                                  QT_TR_NOOP("Stopping…"), QT_TR_NOOP("Finished"), QT_TR_NOOP("Failed")};
    const auto &model = m_dashboard->model();
    if (!m_mergePending)
        m_phaseLabel->setText(tr(names[int(m_controller.phase())]) + (m_controller.isPaused() ? tr(" (paused)") : QString()));
    double rate = 0, t = 0;
    qint64 round = 0;
    for (int w = 0; w < model.workers(); ++w) {
        if (const auto *r = model.lastRound(w)) {
            rate += r->rate;
            t = qMax(t, r->t);
            round = qMax(round, r->round);
        }
    }
    const double best = model.bestAccuracy().lastY(-1);
    m_statsLabel->setText(model.workers() == 0 ? QString()
                                               : tr("round %1 · %2 s · %3 samples/s · best accuracy %4 · %5 merges")
                                                     .arg(round)
                                                     .arg(t, 0, 'f', 0)
                                                     .arg(rate, 0, 'f', 0)
                                                     .arg(best < 0 ? tr("—") : tr("%1 %").arg(best, 0, 'f', 1))
                                                     .arg(model.mergeCount()));
    const core::RunSession &session = m_controller.session();
    if (model.workers() > 0 && session.generation() > 0 && m_controller.isActive())
        m_statsLabel->setText(m_statsLabel->text()
                              + tr(" · %1 of %2 workers (group generation %3)")
                                    .arg(session.members().size())
                                    .arg(model.workers())
                                    .arg(session.generation()));
    m_workers->refresh(model);
}

void MainWindow::log(const QString &text)
{
    qCInfo(lcUi).noquote() << text;
    m_log->appendPlainText(QStringLiteral("%1  %2").arg(QTime::currentTime().toString(QStringLiteral("HH:mm:ss")), text));
}

QJsonObject MainWindow::currentPreset() const
{
    const LocalClusterForm *local = m_cluster->localForm();
    QJsonArray slowdown;
    for (double f : local->slowdown())
        slowdown.append(f);
    QJsonArray hosts;
    for (const QJsonObject &h : m_cluster->hostsForm()->hosts())
        hosts.append(h);
    return QJsonObject{{"job", m_job->job()},
                       {"local", QJsonObject{{"workers", local->workers()},
                                             {"slowdown", slowdown},
                                             {"grace_s", local->graceS()},
                                             {"emulation", local->emulation()}}},
                       {"hosts", hosts}};
}

void MainWindow::applyPreset(const QJsonObject &preset)
{
    m_job->setJob(preset.value("job").toObject());
    if (preset.contains("hosts")) {
        QList<QJsonObject> hosts;
        for (const QJsonValue &h : preset.value("hosts").toArray())
            hosts.append(h.toObject());
        m_cluster->hostsForm()->setHosts(hosts);
    }
    const QJsonObject local = preset.value("local").toObject();
    LocalClusterForm *form = m_cluster->localForm();
    if (local.contains("workers"))
        form->setWorkers(local.value("workers").toInt(3));
    form->setGraceS(local.value("grace_s").toInt());
    const QJsonArray slowdown = local.value("slowdown").toArray();
    for (int w = 0; w < slowdown.size(); ++w)
        form->setSlowdown(w, slowdown[w].toDouble(1));
    const QJsonValue links = local.value("emulation").toObject().value("links");
    if (links.isString())
        form->setLinkPreset(links.toString());
    const QJsonArray rows = links.toArray();
    for (int i = 0; i < rows.size(); ++i) {
        for (int j = 0; j < rows[i].toArray().size(); ++j) {
            if (i != j)
                form->setCap(i, j, rows[i].toArray()[j].toDouble());
        }
    }
    validate();
}

namespace {

// Run `runId` of the default run store; nullopt with the store's message.
std::optional<core::StoredRun> storedRun(qint64 runId, QString *error)
{
    core::RunStore store;
    std::optional<core::StoredRun> run;
    if (store.open(core::RunStore::defaultPath(), core::RunStore::Mode::ReadOnly))
        run = store.loadRun(runId);
    if (!run)
        *error = store.errorString();
    return run;
}

} // namespace

QString MainWindow::exportReport(qint64 runId, const QString &path)
{
    const QString suffix = QFileInfo(path).suffix().toLower();
    const auto format = report::parseFormat(suffix).value_or(report::Format::Csv);
    QString error;
    const auto run = storedRun(runId, &error);
    if (!run)
        return error;
    const report::Result result = report::writeReport(*run, format, path);
    if (!result.ok)
        return result.error;
    log(tr("Run #%1 exported: %2").arg(runId).arg(result.files.join(QStringLiteral(", "))));
    return {};
}

void MainWindow::exportReportInteractively(qint64 runId)
{
    const QString html = tr("HTML report (*.html)"), pdf = tr("PDF report (*.pdf)"), json = tr("JSON summary (*.json)"),
                  csv = tr("CSV tables (folder)");
    QString filter = html;
    QString path = QFileDialog::getSaveFileName(this, tr("Export run #%1").arg(runId),
                                                report::defaultOutputName(runId, report::Format::Html),
                                                QStringList{html, pdf, json, csv}.join(QStringLiteral(";;")), &filter);
    if (path.isEmpty())
        return;
    const QString wanted = filter == pdf ? "pdf" : filter == json ? "json" : filter == html ? "html" : QString();
    if (!wanted.isEmpty() && QFileInfo(path).suffix().toLower() != wanted)
        path += "." + wanted;
    const QString error = exportReport(runId, path);
    if (!error.isEmpty())
        QMessageBox::warning(this, tr("Export failed"), error);
}

QString MainWindow::exportModel(qint64 runId, core::ModelFile which, const QString &path)
{
    QString error;
    const auto run = storedRun(runId, &error);
    if (!run || !core::exportFinalModel(*run, which, path, &error))
        return error;
    log(tr("Model of run #%1 exported: %2 (%3)")
            .arg(runId)
            .arg(path, which == core::ModelFile::StateDict ? QStringLiteral("state_dict") : QStringLiteral("torchscript")));
    return {};
}

void MainWindow::exportModelInteractively(qint64 runId)
{
    const QString script = tr("TorchScript module, torch.jit.load (*.pt)"),
                  state = tr("state_dict of a built-in model, torch.load (*.pt)");
    QString filter = script;
    const QString path = QFileDialog::getSaveFileName(this, tr("Export the model of run #%1").arg(runId),
                                                      QStringLiteral("run-%1-model.pt").arg(runId),
                                                      QStringList{script, state}.join(QStringLiteral(";;")), &filter);
    if (path.isEmpty())
        return;
    const QString error = exportModel(runId, filter == state ? core::ModelFile::StateDict : core::ModelFile::TorchScript, path);
    if (!error.isEmpty())
        QMessageBox::warning(this, tr("Export failed"), error);
}

void MainWindow::savePreset()
{
    bool ok = false;
    const QString name = QInputDialog::getText(this, tr("Save preset"), tr("Preset name:"), QLineEdit::Normal,
                                               QString(), &ok).trimmed();
    if (!ok || name.isEmpty())
        return;
    QString error;
    if (!core::PresetStore().save(name, currentPreset(), &error))
        return void(QMessageBox::warning(this, tr("Preset not saved"), error));
    log(tr("Preset \"%1\" saved.").arg(name));
}

void MainWindow::loadPreset()
{
    const core::PresetStore store;
    const QStringList names = store.names();
    if (names.isEmpty())
        return void(QMessageBox::information(this, tr("No presets"),
                                             tr("No presets saved yet in %1. Use File → Save preset first.").arg(store.folder())));
    bool ok = false;
    const QString name = QInputDialog::getItem(this, tr("Load preset"), tr("Preset:"), names, 0, false, &ok);
    if (!ok)
        return;
    QString error;
    const auto preset = store.load(name, &error);
    if (!preset)
        return void(QMessageBox::warning(this, tr("Preset not loaded"), error));
    applyPreset(*preset);
    log(tr("Preset \"%1\" loaded.").arg(name));
}

void MainWindow::restoreSettings()
{
    QSettings s;
    if (!restoreGeometry(s.value("window/geometry").toByteArray()))
        resize(1500, 940);
    restoreState(s.value("window/state").toByteArray());
    m_cluster->setMode(s.value("setup/mode").toString() == QLatin1String("machines") ? ClusterPage::Mode::Machines
                                                                                       : ClusterPage::Mode::Local);
    const QJsonDocument last = QJsonDocument::fromJson(s.value("setup/last").toByteArray());
    if (last.isObject())
        applyPreset(last.object());
    // First run: start at the cluster choice; later, at the job.
    showPage(s.contains("setup/mode") ? Page::Job : Page::Cluster);
}

void MainWindow::saveSettings() const
{
    QSettings s;
    s.setValue("window/geometry", saveGeometry());
    s.setValue("window/state", saveState());
    s.setValue("setup/mode", m_cluster->mode() == ClusterPage::Mode::Local ? "local" : "machines");
    s.setValue("setup/last", QJsonDocument(currentPreset()).toJson(QJsonDocument::Compact));
}

void MainWindow::closeEvent(QCloseEvent *event)
{
    if (m_controller.canLeaveRunning()) {
        QMessageBox box(QMessageBox::Question, tr("A run is training"),
                        tr("Leave the run training without DLion Studio? Its agents train on for up to %1 s; "
                           "File → Attach to run takes it over again.").arg(m_controller.graceS()),
                        QMessageBox::Cancel, this);
        QPushButton *leave = box.addButton(tr("&Leave it training"), QMessageBox::AcceptRole);
        QPushButton *stop = box.addButton(tr("&Stop the run"), QMessageBox::DestructiveRole);
        box.setDefaultButton(leave);
        box.exec();
        if (box.clickedButton() == leave)
            m_controller.leaveRunning();
        else if (box.clickedButton() != stop)
            return event->ignore();
    }
    saveSettings();
    if (m_controller.isActive())
        m_controller.stop();
    event->accept();
}

} // namespace dlion::ui
