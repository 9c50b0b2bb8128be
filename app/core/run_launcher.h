#pragma once

#include "attach_file.h"
#include "job_builder.h"
#include "run_recorder.h"
#include "run_session.h"
#include "run_store.h"

#include <QJsonObject>
#include <QObject>

#include <memory>
#include <optional>

namespace dlion::core {

class AttachPoint;
class Deployer;
class LocalCluster;
class LocalRejoin;

// Starts, takes over and ends a run for either face (`dlion run` / `dlion
// attach`, DLion Studio), so both do it alike: the run folder, the agents
// (the embedded local cluster or an SSH deployment), the rendezvous port,
// the session, its recording and attach.json, restarts of lost local
// workers, and at the end DIR/summary.json and the agents' release.
// Progress and problems come as signals the faces print or show; it never
// blocks the event loop.
class RunLauncher : public QObject {
    Q_OBJECT
public:
    enum class Phase { Idle, StartingAgents, Running, Stopping, Finished, Failed };
    Q_ENUM(Phase)

    struct Options {
        QString runDir;          // empty: a new folder under RunStore::defaultRunsDir()
        QString storePath;       // empty: RunStore::defaultPath()
        int graceS = 0;          // local: agents train on this long without a control center
        int restartLostMs = -1;  // local: restart a lost worker's agent after this delay (< 0: by hand only)
    };

    explicit RunLauncher(QObject *parent = nullptr);
    ~RunLauncher() override;

    // `requested`, or a new folder named after the time and the strategy;
    // nullopt with a message naming the folder when it cannot be created.
    static std::optional<QString> createRunDir(const QString &requested, const QString &strategy, QString *error);
    // The data-plane rendezvous port on rank 0's host: `configured` when
    // set, else a free one when that host is this machine, else c10d's
    // customary 29500.
    static quint16 rendezvousPort(int configured, const QString &rank0Host);

    // Starts `request.workers` local agents, then the job.
    void startLocal(const JobRequest &request, const Options &options);
    // Deploys agents with `deployer` (host order = rank), then the job.
    // `clusterFile` is recorded with the run when the hosts came from one.
    // A TorchScript model whose SHA-256 the job carries (buildJob sets it)
    // is uploaded to every host, and each agent loads its host's copy.
    void startRemote(const JobRequest &request, std::unique_ptr<Deployer> deployer, const QString &clusterFile,
                     const Options &options);
    // Runs the job on agents that already listen, started by hand with
    // `secret` (dlion-agent --listen HOST:PORT --secret-file FILE), one
    // worker per endpoint in rank order. They are not ours: they are not
    // told to exit when the run ends, so they can take the next job.
    void startOnAgents(const JobRequest &request, const QList<AgentEndpoint> &agents, const QByteArray &secret,
                       const Options &options);
    // Takes over the run whose folder holds an attach.json: same stored
    // run, same controls.
    void attach(const QString &runDir);
    // Asks the workers to stop cleanly (before they run: gives up the start).
    void stop();
    // Whether the run can train on after this control center closes, and
    // letting it: the agents stay up and untold, attach.json stays.
    bool canLeaveRunning() const;
    void leaveRunning();
    // Restarts a lost worker's local agent and lets it rejoin the group.
    bool canRestartWorker(int worker) const;
    void restartWorker(int worker);

    Phase phase() const { return m_phase; }
    bool isActive() const { return m_phase == Phase::StartingAgents || m_phase == Phase::Running || m_phase == Phase::Stopping; }
    RunSession &session() { return m_session; }
    const JobRequest &request() const { return m_request; }
    // The embedded cluster of the current run (nullptr when none).
    LocalCluster *localCluster() const { return m_cluster.get(); }
    // The deployment of the current run (nullptr when none).
    Deployer *deployer() const { return m_deployer.get(); }
    // The current run's folder, and its attach.json's grace (0: none kept).
    QString runDir() const { return m_runDir; }
    int graceS() const;
    // The summary written at the end, and where (empty when it could not be).
    const QJsonObject &summary() const { return m_summary; }
    QString summaryPath() const { return m_summaryPath; }
    // The run's final model in its folder (dlion export); empty when the
    // run sent none.
    QString modelPath() const { return m_modelPath; }
    // The cluster file of a taken-over SSH run: its agents' folders stay on
    // the hosts, with no deployer here to remove them.
    QString takenOverClusterFile() const { return m_takenOverCluster; }
    const RunRecorder &recorder() const { return m_recorder; }
    qint64 recordedRunId() const { return m_recorder.runId(); }
    QString storePath() const { return m_store.path(); }

Q_SIGNALS:
    void phaseChanged(dlion::core::RunLauncher::Phase phase);
    void message(const QString &text);
    void runStarted(int workers);
    // The run could not start or be taken over.
    void failed(const QString &reason);
    // The session ended: summary written, recording finished.
    void finished(bool ok, const QString &message);
    // After failed() or finished(): the agents are told to go (remote ones
    // also removed); ok false when a host could not be cleaned up.
    void released(bool ok);

private:
    // Fresh state for the next run, started or taken over.
    void resetFor(const JobRequest &request, const QByteArray &secret, const Options &options);
    // What every start shares: fresh state, the run folder, the store.
    bool prepare(const JobRequest &request, const Options &options, const QByteArray &secret);
    // Opens the store at `path` (if not open there) and records the session into it.
    bool openStore(const QString &path);
    void recordAs(const QJsonObject &cluster);
    void startSession(const QList<AgentEndpoint> &agents, const QString &rendezvousHost, quint16 port, int graceS);
    void keepAttachPoint(AttachFile file);
    void onLocalReady();
    void onDeployed(const QList<AgentEndpoint> &agents);
    void onSessionFinished(bool ok, const QString &message);
    void writeSummary();
    // Writes the final model the run sent into its run folder.
    void keepFinalModel();
    void setPhase(Phase p);
    void fail(const QString &reason);
    void releaseAgents();

    RunSession m_session;
    RunStore m_store;
    RunRecorder m_recorder{&m_store};
    bool m_recorderAttached = false;
    std::unique_ptr<AttachPoint> m_attachPoint;
    std::unique_ptr<LocalCluster> m_cluster;
    std::unique_ptr<LocalRejoin> m_rejoin;  // with m_cluster, once its agents listen
    std::unique_ptr<Deployer> m_deployer;
    JobRequest m_request;
    QByteArray m_secret;
    QString m_runDir;
    QString m_takenOverCluster;
    QJsonObject m_summary;
    QString m_summaryPath;
    QString m_modelPath;
    Options m_options;
    Phase m_phase = Phase::Idle;
    bool m_released = true;    // the agents are told to go, or left running: not ours to stop
    bool m_handStarted = false;  // startOnAgents: the agents stay up after the run
    bool m_cancelled = false;  // stop() while the deployment still works
};

} // namespace dlion::core
