#pragma once

#include "cluster_spec.h"
#include "remote_agent.h"
#include "run_session.h"

#include <QHash>
#include <QList>
#include <QObject>

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>

class QThread;

namespace dlion::core {

// Gets dlion-agents running on the hosts of a cluster file, and gone again.
//
// `deploy(secret)` works on every host in parallel (one thread each, see
// RemoteAgent), reporting each step through `hostProgress`. When every
// agent is listening it proves each answers with the run secret (the same
// authenticated handshake a run uses), then emits `deployed(endpoints)` in
// host order. If any host fails, the agents already started elsewhere are
// stopped and removed, then `failed(reason)` fires with the first error.
// `stop()` kills the agents and removes their files on every host (also
// left-overs of an earlier controller), then emits `stopped(ok, message)`.
//
// Questions for the user: with HostKeyPolicy::Ask an unknown host key
// emits `hostKeyUnknown(host, fingerprint)`, and that host waits for
// `answerHostKey()`; auth: password emits `passwordRequested(host)` and waits
// for `answerPassword()`. Passwords stay in memory, never on disk. A changed
// host key is always refused.
class Deployer : public QObject {
    Q_OBJECT
public:
    enum class HostKeyPolicy { Ask, AcceptNew, RefuseNew };

    explicit Deployer(ClusterSpec cluster, QObject *parent = nullptr);
    ~Deployer() override;

    void setAgentProgram(const QString &path) { m_agentProgram = path; }
    // A job's TorchScript model, uploaded to every host (see RemoteAgent);
    // each endpoint then names its host's copy.
    void setModel(const QString &path, const QString &sha256)
    {
        m_modelFile = path;
        m_modelSha256 = sha256;
    }
    void setHostKeyPolicy(HostKeyPolicy policy) { m_policy = policy; }
    // How long a host waits for an answer to a question before giving up.
    void setAnswerTimeout(int ms) { m_answerTimeoutMs = ms; }
    // How long the agents train on without a controller, and then wait for
    // one before they exit (RemoteAgent::kGraceS unless set).
    void setAgentGrace(int seconds) { m_agentGraceS = seconds; }

    void deploy(const QByteArray &secret);
    void stop();
    bool isBusy() const { return !m_threads.isEmpty(); }

    void answerHostKey(const QString &host, bool accept);
    // An empty password means the user declined.
    void answerPassword(const QString &host, const QString &password);

    const ClusterSpec &cluster() const { return m_cluster; }
    QList<AgentEndpoint> endpoints() const { return m_endpoints; }

Q_SIGNALS:
    void hostProgress(const QString &host, const QString &stage, const QString &message);
    void hostKeyUnknown(const QString &host, const QString &fingerprint);
    void passwordRequested(const QString &host);
    void hostFailed(const QString &host, const QString &reason);
    void deployed(const QList<dlion::core::AgentEndpoint> &endpoints);
    void failed(const QString &reason);
    void stopped(bool ok, const QString &message);

private:
    struct Outcome {
        bool ok = false;
        AgentEndpoint endpoint;
        QString error;
    };
    using HostTask = std::function<Outcome(RemoteAgent &agent)>;
    using Done = std::function<void(const QList<Outcome> &outcomes)>;

    RemoteAgent::Setup setupFor(const QString &host);
    // Runs `task` for the hosts in `which` (indices), one thread each; calls
    // `done` on this object's thread when all have ended.
    void runOnHosts(const QList<int> &which, const HostTask &task, const Done &done);
    void onDeployDone(const QList<Outcome> &outcomes);
    void verifyAgents();
    QList<int> allHosts() const;
    void stopHosts(const QList<int> &hosts, const std::function<void(bool, const QString &)> &then);
    // Blocks the calling host thread until `key` is answered or times out.
    std::optional<QString> awaitAnswer(const QString &key);
    void answer(const QString &key, const QString &value);

    ClusterSpec m_cluster;
    QString m_agentProgram;
    QString m_modelFile;
    QString m_modelSha256;
    HostKeyPolicy m_policy = HostKeyPolicy::Ask;
    int m_answerTimeoutMs = 300000;
    int m_agentGraceS = RemoteAgent::kGraceS;
    QByteArray m_secret;
    QList<AgentEndpoint> m_endpoints;
    QList<QThread *> m_threads;

    std::mutex m_mutex;
    std::condition_variable m_answered;
    QHash<QString, QString> m_answers;
    QHash<QString, QByteArray> m_passwords;
    bool m_closing = false;
};

} // namespace dlion::core
