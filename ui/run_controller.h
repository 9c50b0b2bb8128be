#pragma once

#include <attach_file.h>
#include <cluster_spec.h>
#include <job_builder.h>
#include <run_recorder.h>
#include <run_session.h>
#include <run_store.h>

#include <QObject>

#include <memory>

namespace dlion::core {
class AttachPoint;
class Deployer;
class LocalCluster;
class LocalRejoin;
}

namespace dlion::ui {

// Drives one run from the GUI: brings up the agents (the embedded local
// cluster, or the user's machines through the SSH Deployer), hands the job
// to a RunSession, records it in the run store, and takes the agents down
// when the run ends. Never blocks the event loop; every failure ends in
// `failed(message)` with a message naming what went wrong.
class RunController : public QObject {
    Q_OBJECT
public:
    enum class Phase { Idle, StartingAgents, Running, Stopping, Finished, Failed };
    Q_ENUM(Phase)

    explicit RunController(QObject *parent = nullptr);
    ~RunController() override;

    // Starts `request.workers` local agents, then the job. graceS > 0: the
    // agents train on that long without a control center, and the run can
    // be taken over from its folder (attachTo).
    void startLocal(const core::JobRequest &request, int graceS = 0);
    // Takes over the run whose folder holds an attach.json, left by a
    // control center that went away: same stored run, same controls.
    void attachTo(const QString &runDir);
    // Whether the run can train on after this control center closes.
    bool canLeaveRunning() const;
    // Lets the run train on without us: the agents stay up and untold,
    // attach.json stays for whoever takes over. Call before closing.
    void leaveRunning();
    // The current run's folder (attach.json), empty when it has none.
    QString runDir() const;
    // How long its agents train on without a control center (0: not at all).
    int graceS() const;
    // Deploys agents to the cluster's hosts (host order = rank), then the job.
    void startRemote(const core::JobRequest &request, const core::ClusterSpec &cluster);
    // Deploys to every host and removes the agents again: proves the
    // machines can run a job. Ends in `deploymentChecked`.
    void checkDeployment(const core::ClusterSpec &cluster);
    void answerHostKey(const QString &host, bool accept);
    void answerPassword(const QString &host, const QString &password);
    void stop();
    // Restarts a lost worker's local agent and lets it rejoin the group.
    void restartWorker(int worker);
    bool canRestartWorker(int worker) const;
    void pause();
    void resume();

    Phase phase() const { return m_phase; }
    bool isActive() const { return m_phase == Phase::StartingAgents || m_phase == Phase::Running || m_phase == Phase::Stopping; }
    core::RunSession &session() { return m_session; }
    // The embedded cluster of the current run (nullptr when none).
    core::LocalCluster *localCluster() const { return m_cluster.get(); }
    const core::JobRequest &request() const { return m_request; }
    // Id of the current or last run in the store (0: not recorded).
    qint64 recordedRunId() const { return m_recorder.runId(); }
    QString storePath() const { return m_store.path(); }
    bool isPaused() const { return m_paused; }

Q_SIGNALS:
    void phaseChanged(dlion::ui::RunController::Phase phase);
    void message(const QString &text);
    void runStarted(int workers);
    void ended(bool ok, const QString &message);
    void hostProgress(const QString &host, const QString &stage, const QString &message);
    void hostFailed(const QString &host, const QString &reason);
    void hostKeyQuestion(const QString &host, const QString &fingerprint);
    void passwordQuestion(const QString &host);
    void deploymentChecked(bool ok, const QString &message);

private:
    void setPhase(Phase p);
    void fail(const QString &reason);
    void releaseAgents();
    core::Deployer *makeDeployer(const core::ClusterSpec &cluster);
    // Opens the store on first use; a store that cannot open only costs
    // the recording, never the run. The recorder's run folder is `runDir`,
    // or a new one.
    void prepareRecording(const QJsonObject &cluster, QString runDir = {});
    // attach.json kept in the run folder while the run trains.
    void keepAttachPoint(core::AttachFile file, QString runDir = {});
    // Writes the final model the run sent into its run folder.
    void keepFinalModel();

    core::RunSession m_session;
    core::RunStore m_store;
    core::RunRecorder m_recorder{&m_store};
    bool m_recorderAttached = false;
    std::unique_ptr<core::AttachPoint> m_attachPoint;
    bool m_left = false;  // leaveRunning(): the agents are not ours to stop
    std::unique_ptr<core::LocalCluster> m_cluster;
    std::unique_ptr<core::LocalRejoin> m_rejoin;  // with m_cluster, once its agents listen
    core::Deployer *m_deployer = nullptr;  // owned; deleted once its agents are stopped
    core::JobRequest m_request;
    QByteArray m_secret;
    Phase m_phase = Phase::Idle;
    bool m_paused = false;
};

} // namespace dlion::ui
