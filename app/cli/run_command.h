#pragma once

#include "console_deployer.h"

#include <run_launcher.h>

#include <QCommandLineParser>
#include <QElapsedTimer>
#include <QObject>
#include <QStringList>
#include <QTimer>

#include <memory>

namespace dlion::cli {

// `dlion run`: trains a job on the embedded local cluster or the machines
// of a cluster file, shows progress,
// writes DIR/summary.json. Exit status: 0 success, 1 failed run, 2 bad usage.
// The terminal's face over core::RunLauncher.
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
    // exec's steps: each names what is wrong on stderr and returns false.
    bool readAgentOptions(const QCommandLineParser &parser, core::RunLauncher::Options *options);
    bool loadCluster(const QCommandLineParser &parser, QJsonObject &overrides);
    void start(const core::JobRequest &request, const QString &clusterFile, const core::RunLauncher::Options &options);
    // Progress, log and end of the run: shared by run and attach.
    void follow(bool quiet);
    int runEventLoop();
    void printProgress();
    void printSummary(bool ok, const QString &message);

    QString m_name = QStringLiteral("dlion run");
    std::unique_ptr<ConsoleDeployer> m_remote;  // set with --cluster; outlives the deployer it hands over
    core::RunLauncher m_launcher;
    QTimer m_progressTimer;
    QElapsedTimer m_clock;
    bool m_tty = false;
    int m_interrupts = 0;
    int m_exitCode = 1;
};

} // namespace dlion::cli
