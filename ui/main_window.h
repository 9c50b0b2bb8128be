#pragma once

#include "run_controller.h"

#include <model_export.h>

#include <QMainWindow>

#include <optional>

class QAction;
class QLabel;
class QMenu;
class QPlainTextEdit;
class QTabWidget;
class QTimer;

namespace dlion::core {
class HostProbe;
}

namespace dlion::ui {

class ClusterPage;
class Dashboard;
class JobEditor;
class LiveControls;
class WorkerStatusList;

// The control center: cluster setup, job editor and live dashboard as
// pages, run controls in the toolbar, workers and the log in docks.
class MainWindow : public QMainWindow {
    Q_OBJECT
public:
    enum class Page { Cluster, Job, Dashboard };

    explicit MainWindow(QWidget *parent = nullptr);
    ~MainWindow() override;

    void showPage(Page page);
    // Checks the setup and the job, marking invalid inputs in place; the
    // request to run when all is valid.
    std::optional<core::JobRequest> validate();
    QString validationMessage() const { return m_problem; }

    ClusterPage *clusterPage() const { return m_cluster; }
    JobEditor *jobEditor() const { return m_job; }
    Dashboard *dashboard() const { return m_dashboard; }
    WorkerStatusList *workerList() const { return m_workers; }
    LiveControls *liveControls() const { return m_live; }
    RunController *controller() { return &m_controller; }
    QAction *startAction() const { return m_start; }
    QAction *pauseAction() const { return m_pause; }
    QAction *stopAction() const { return m_stop; }
    QAction *mergeAction() const { return m_merge; }
    QAction *restartWorkerAction() const { return m_restartWorker; }
    QAction *attachAction() const { return m_attach; }
    // Takes over the run in `runDir` (its attach.json) and shows it live.
    void attachToRun(const QString &runDir);
    // Runs the set-up job on agents that already listen, started by hand
    // with `secret`, one worker per agent (the setup's worker count must
    // match), and shows it live like any run.
    void startOnAgents(const QList<core::AgentEndpoint> &agents, const QByteArray &secret);
    QString statusText() const;
    // Writes a stored run's report to `path` (format from its extension:
    // .html, .pdf, .json, else a CSV folder); returns the error or empty.
    QString exportReport(qint64 runId, const QString &path);
    // File → Export trained model: file `which` of run `runId`'s final
    // model to `path` (core::exportFinalModel); returns an error message,
    // empty on success.
    QString exportModel(qint64 runId, core::ModelFile which, const QString &path);

protected:
    void closeEvent(QCloseEvent *event) override;

private:
    void buildActions();
    void buildDocks();
    QWidget *buildJobPage();
    void start();
    // The checked request with the views reset for it (nullopt, logged, when
    // a run is active or the setup is invalid); `where` names the workers.
    std::optional<core::JobRequest> beginRun(const QString &where);
    void chooseRunToAttach();
    // Dashboard, workers and live controls for a run of `workers`.
    void resetViews(int workers, const QList<QList<double>> &caps);
    void connectMachines();
    std::optional<core::ClusterSpec> clusterSpec(QString *error) const;
    bool askHostKey(const QString &host, const QString &fingerprint);
    std::optional<QByteArray> askPassword(const QString &host);
    void mergeNow();
    void onPhaseChanged(RunController::Phase phase);
    void onMerge(const protocol::MergeEvent &event);
    void updateActions();
    void updateStatus();
    void log(const QString &text);
    void exportReportInteractively(qint64 runId);
    // Asks where, then exportModel().
    void exportModelInteractively(qint64 runId);
    void savePreset();
    void loadPreset();
    QJsonObject currentPreset() const;
    void applyPreset(const QJsonObject &preset);
    void restoreSettings();
    void saveSettings() const;

    RunController m_controller;
    QTabWidget *m_tabs;
    ClusterPage *m_cluster;
    JobEditor *m_job;
    Dashboard *m_dashboard;
    WorkerStatusList *m_workers;
    LiveControls *m_live;
    QPlainTextEdit *m_log;
    core::HostProbe *m_probe;
    QLabel *m_banner;
    QLabel *m_phaseLabel;
    QLabel *m_statsLabel;
    QAction *m_start, *m_pause, *m_stop, *m_merge, *m_restartWorker, *m_attach;
    QMenu *m_viewMenu = nullptr;
    QString m_problem;
    bool m_mergePending = false;
    QTimer *m_mergeTimeout;
};

} // namespace dlion::ui
