#pragma once

#include "cluster_spec.h"
#include "run_session.h"
#include "ssh_session.h"

#include <functional>
#include <optional>

namespace dlion::core {

// The life of one dlion-agent on one cluster host, done over SSH. Blocking:
// the Deployer runs each host's steps on its own thread.
//
// Everything the agent needs lives in one remote folder,
// `<work_dir>/dlion-<host name>/` (mode 700; the preflight refuses a
// work_dir another user could change): the binary (unless the host has an
// installed one), the secret file (mode 600), agent.pid and agent.log.
// `stop()` kills the agent it finds there and removes the folder, so it also
// cleans up after a controller that died.
//
// A job's own TorchScript model goes to `<work_dir>/dlion_models/<sha256>.pt`
// (mode 600; "_" so no host's run folder can take the name): checked by
// SHA-256 on the host, uploaded only when no such copy is there, and kept
// after the run, so the next run with the same model uploads nothing.
class RemoteAgent {
public:
    // How long a remote agent trains on without a controller, and then waits
    // for one before it exits.
    static constexpr int kGraceS = 30;
    struct Setup {
        QString agentProgram;  // local dlion-agent to upload
        QString modelFile;     // local TorchScript model to upload (empty: none)
        QString modelSha256;   // its SHA-256, as the job carries it
        int graceS = kGraceS;  // --grace and --idle-exit of the agent
        QString knownHosts;
        int timeoutS = 10;
        SshSession::KeyPrompt acceptKey;
        SshSession::PasswordPrompt password;
        std::function<void(const QString &stage, const QString &message)> progress;
    };

    RemoteAgent(ClusterHost host, Setup setup);

    // Connects, checks the host, installs the agent (and the model) and
    // starts it with `secret`; returns where it listens once it says so,
    // and where the model is on the host.
    std::optional<AgentEndpoint> deploy(const QByteArray &secret, QString *error);
    bool stop(QString *error);

    const ClusterHost &host() const { return m_host; }

private:
    bool connect(SshSession &ssh, QString *error);
    bool preflight(SshSession &ssh, QString *error);
    bool install(SshSession &ssh, const QByteArray &secret, QString *error);
    bool checkLibraries(SshSession &ssh, QString *error);
    // Sets m_remoteModel to the model's absolute path on the host.
    bool uploadModel(SshSession &ssh, QString *error);
    std::optional<AgentEndpoint> start(SshSession &ssh, QString *error);
    // Kills the agent in the run folder (if it still runs) and removes the folder.
    bool removeAgent(SshSession &ssh, QString *error);
    std::optional<SshSession::ExecResult> run(SshSession &ssh, const QString &command, int timeoutMs, QString *error);
    // The run folder as the shell and as SFTP name it ("~/" is the home folder).
    static QString homePath(const QString &path);
    static QString sftpPath(const QString &path);
    QString shellDir() const;
    QString sftpDir() const;
    QString agentCommand() const;

    ClusterHost m_host;
    Setup m_setup;
    QString m_listen;
    QString m_remoteModel;
};

} // namespace dlion::core
