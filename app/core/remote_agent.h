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
class RemoteAgent {
public:
    // How long a remote agent trains on without a controller, and then waits
    // for one before it exits.
    static constexpr int kGraceS = 30;
    struct Setup {
        QString agentProgram;  // local dlion-agent to upload
        int graceS = kGraceS;  // --grace and --idle-exit of the agent
        QString knownHosts;
        int timeoutS = 10;
        SshSession::KeyPrompt acceptKey;
        SshSession::PasswordPrompt password;
        std::function<void(const QString &stage, const QString &message)> progress;
    };

    RemoteAgent(ClusterHost host, Setup setup);

    // Connects, checks the host, installs and starts the agent with `secret`,
    // and returns where it listens once it says so.
    std::optional<AgentEndpoint> deploy(const QByteArray &secret, QString *error);
    bool stop(QString *error);

    const ClusterHost &host() const { return m_host; }

private:
    bool connect(SshSession &ssh, QString *error);
    bool preflight(SshSession &ssh, QString *error);
    bool install(SshSession &ssh, const QByteArray &secret, QString *error);
    bool checkLibraries(SshSession &ssh, QString *error);
    std::optional<AgentEndpoint> start(SshSession &ssh, QString *error);
    // Kills the agent in the run folder (if it still runs) and removes the folder.
    bool removeAgent(SshSession &ssh, QString *error);
    std::optional<SshSession::ExecResult> run(SshSession &ssh, const QString &command, int timeoutMs, QString *error);
    // The run folder as the shell and as SFTP name it ("~/" is the home folder).
    static QString homePath(const QString &path);
    QString shellDir() const;
    QString sftpDir() const;
    QString agentCommand() const;

    ClusterHost m_host;
    Setup m_setup;
    QString m_listen;
};

} // namespace dlion::core
