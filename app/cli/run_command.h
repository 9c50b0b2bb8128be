#pragma once

#include "console_deployer.h"

#include <attach_point.h>
#include <job_builder.h>
#include <local_cluster.h>
#include <local_rejoin.h>
#include <run_recorder.h>
#include <run_session.h>
#include <run_store.h>

#include <QDir>
#include <QElapsedTimer>
#include <QObject>
#include <QStringList>
#include <QTimer>

#include <memory>

namespace dlion::cli {

// `dlion run`: trains a job on the embedded local cluster or the machines
// of a cluster file, shows progress,
// writes DIR/summary.json. Exit status: 0 success, 1 failed run, 2 bad usage.
class RunCommand : public QObject {
    Q_OBJECT
public:
    int exec(const QStringList &args);
    // `dlion attach RUN_DIR`: takes over a run whose dlion run (started with
    // --grace) went away while its agents trained on.
    int attach(const QStringList &args);

    // Ctrl-C: the first asks the workers to stop cleanly, the second exits.
    void interrupt();

private:
    void onClusterReady();
    // Progress, log and end of the session: shared by run and attach.
    void followSession(bool quiet);
    // Keeps RUN_DIR/attach.json for `dlion attach` while the run trains.
    void keepAttachPoint(const QList<core::AgentEndpoint> &agents, const QString &rendezvousHost, quint16 rendezvousPort,
                         int graceS);
    void printProgress(bool force = false);
    void onFinished(bool ok, const QString &message);
    // --cluster: deploy agents over SSH, run on them, remove them after.
    void deployRemote();
    void exitAfterCleanup(int code);

    core::JobRequest m_request;
    QDir m_outDir;
    QByteArray m_secret;
    core::LocalCluster m_cluster;
    core::RunSession m_session;
    std::unique_ptr<ConsoleDeployer> m_remote;  // set with --cluster
    std::unique_ptr<core::LocalRejoin> m_rejoin;
    int m_restartLostMs = -1;  // --restart-lost
    int m_graceS = 0;  // --grace
    std::unique_ptr<core::AttachPoint> m_attachPoint;
    QString m_takenOverCluster;  // attach: the cluster file of a cluster run
    core::RunStore m_store;
    core::RunRecorder m_recorder{&m_store};
    QTimer m_progressTimer;
    QElapsedTimer m_clock;
    bool m_tty = false;
    int m_interrupts = 0;
    int m_exitCode = 1;
};

} // namespace dlion::cli
