#pragma once

#include <cluster_spec.h>
#include <job_builder.h>
#include <run_launcher.h>

#include <QObject>

namespace dlion::core {
class Deployer;
class LocalCluster;
}

namespace dlion::ui {

// The GUI's face over core::RunLauncher: starts a run on the embedded local
// cluster or the user's machines (through the SSH Deployer, whose questions
// it passes on), takes runs over, and checks deployments. Never blocks the
// event loop; every failure ends in `ended(false, message)` with a message
// naming what went wrong.
class RunController : public QObject {
    Q_OBJECT
public:
    using Phase = core::RunLauncher::Phase;

    explicit RunController(QObject *parent = nullptr);
    ~RunController() override;

    // Starts `request.workers` local agents, then the job. graceS > 0: the
    // agents train on that long without a control center, and the run can
    // be taken over from its folder (attachTo).
    void startLocal(const core::JobRequest &request, int graceS = 0);
    // Runs the job on agents that already listen, started by hand with
    // `secret` (core::RunLauncher::startOnAgents); they stay up afterwards.
    void startOnAgents(const core::JobRequest &request, const QList<core::AgentEndpoint> &agents, const QByteArray &secret);
    // Takes over the run whose folder holds an attach.json, left by a
    // control center that went away: same stored run, same controls.
    void attachTo(const QString &runDir);
    // Whether the run can train on after this control center closes.
    bool canLeaveRunning() const { return m_launcher.canLeaveRunning(); }
    // Lets the run train on without us: the agents stay up and untold,
    // attach.json stays for whoever takes over. Call before closing.
    void leaveRunning();
    // The current run's folder.
    QString runDir() const { return m_launcher.runDir(); }
    // How long its agents train on without a control center (0: not at all).
    int graceS() const { return m_launcher.graceS(); }
    // Deploys agents to the cluster's hosts (host order = rank), then the job.
    void startRemote(const core::JobRequest &request, const core::ClusterSpec &cluster);
    // Deploys to every host and removes the agents again: proves the
    // machines can run a job. Ends in `deploymentChecked`.
    void checkDeployment(const core::ClusterSpec &cluster);
    void answerHostKey(const QString &host, bool accept);
    void answerPassword(const QString &host, const QString &password);
    void stop();
    // Restarts a lost worker's local agent and lets it rejoin the group.
    void restartWorker(int worker) { m_launcher.restartWorker(worker); }
    bool canRestartWorker(int worker) const { return m_launcher.canRestartWorker(worker); }
    void pause();
    void resume();

    Phase phase() const { return m_launcher.phase(); }
    bool isActive() const { return m_launcher.isActive(); }
    core::RunSession &session() { return m_launcher.session(); }
    // The embedded cluster of the current run (nullptr when none).
    core::LocalCluster *localCluster() const { return m_launcher.localCluster(); }
    const core::JobRequest &request() const { return m_launcher.request(); }
    // Id of the current or last run in the store (0: not recorded).
    qint64 recordedRunId() const { return m_launcher.recordedRunId(); }
    QString storePath() const { return m_launcher.storePath(); }
    bool isPaused() const { return m_paused; }

Q_SIGNALS:
    void phaseChanged(dlion::core::RunLauncher::Phase phase);
    void message(const QString &text);
    void runStarted(int workers);
    void ended(bool ok, const QString &message);
    void hostProgress(const QString &host, const QString &stage, const QString &message);
    void hostFailed(const QString &host, const QString &reason);
    void hostKeyQuestion(const QString &host, const QString &fingerprint);
    void passwordQuestion(const QString &host);
    void deploymentChecked(bool ok, const QString &message);

private:
    std::unique_ptr<core::Deployer> makeDeployer(const core::ClusterSpec &cluster);
    // The deployer questions are answered to: the check's, else the run's.
    core::Deployer *askingDeployer() const;

    core::RunLauncher m_launcher;
    core::Deployer *m_check = nullptr;  // checkDeployment's; deletes itself when done
    bool m_paused = false;
};

} // namespace dlion::ui
