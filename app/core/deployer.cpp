#include "deployer.h"

#include "local_cluster.h"

#include <QThread>

#include <chrono>

namespace dlion::core {

Deployer::Deployer(ClusterSpec cluster, QObject *parent) : QObject(parent), m_cluster(std::move(cluster)) {}

Deployer::~Deployer()
{
    {
        std::lock_guard lock(m_mutex);
        m_closing = true;
        for (QByteArray &pw : m_passwords)
            pw.fill('\0');
    }
    m_answered.notify_all();
    for (QThread *t : std::as_const(m_threads)) {
        t->wait();
        delete t;
    }
}

std::optional<QString> Deployer::awaitAnswer(const QString &key)
{
    std::unique_lock lock(m_mutex);
    m_answered.wait_for(lock, std::chrono::milliseconds(m_answerTimeoutMs),
                        [&] { return m_closing || m_answers.contains(key); });
    if (!m_answers.contains(key))
        return std::nullopt;
    return m_answers.take(key);
}

void Deployer::answer(const QString &key, const QString &value)
{
    {
        std::lock_guard lock(m_mutex);
        m_answers.insert(key, value);
    }
    m_answered.notify_all();
}

void Deployer::answerHostKey(const QString &host, bool accept)
{
    answer("key:" + host, accept ? QStringLiteral("yes") : QStringLiteral("no"));
}

void Deployer::answerPassword(const QString &host, const QString &password) { answer("pw:" + host, password); }

RemoteAgent::Setup Deployer::setupFor(const QString &host)
{
    RemoteAgent::Setup s;
    s.agentProgram = m_agentProgram;
    s.modelFile = m_modelFile;
    s.modelSha256 = m_modelSha256;
    s.graceS = m_agentGraceS;
    s.knownHosts = m_cluster.knownHosts;
    s.timeoutS = m_cluster.connectTimeoutS;
    // These run on the host's thread. Signals are emitted on the deployer's
    // own thread, so every receiver (a QSignalSpy too) sees them in order
    // and never concurrently.
    auto post = [this](auto emitter) { QMetaObject::invokeMethod(this, emitter, Qt::QueuedConnection); };
    s.progress = [this, host, post](const QString &stage, const QString &message) {
        post([this, host, stage, message] { Q_EMIT hostProgress(host, stage, message); });
    };
    s.acceptKey = [this, host, post](const QString &fingerprint) {
        if (m_policy != HostKeyPolicy::Ask) {
            const bool accept = m_policy == HostKeyPolicy::AcceptNew;
            const QString message = QStringLiteral("%1 new host key %2").arg(accept ? "accepting" : "refusing", fingerprint);
            post([this, host, message] { Q_EMIT hostProgress(host, QStringLiteral("host-key"), message); });
            return accept;
        }
        post([this, host, fingerprint] { Q_EMIT hostKeyUnknown(host, fingerprint); });
        return awaitAnswer("key:" + host) == QStringLiteral("yes");
    };
    s.password = [this, host, post]() -> std::optional<QByteArray> {
        {
            std::lock_guard lock(m_mutex);
            if (m_passwords.contains(host))
                return m_passwords.value(host);
        }
        post([this, host] { Q_EMIT passwordRequested(host); });
        const std::optional<QString> pw = awaitAnswer("pw:" + host);
        if (!pw || pw->isEmpty())
            return std::nullopt;
        std::lock_guard lock(m_mutex);
        m_passwords.insert(host, pw->toUtf8());
        return pw->toUtf8();
    };
    return s;
}

void Deployer::runOnHosts(const QList<int> &which, const HostTask &task, const Done &done)
{
    struct Batch {
        QList<Outcome> outcomes;
        QList<QThread *> threads;
        int remaining = 0;
    };
    auto batch = std::make_shared<Batch>();
    batch->outcomes.resize(which.size());
    batch->remaining = int(which.size());
    if (which.isEmpty())
        return done({});
    for (int k = 0; k < which.size(); ++k) {
        const ClusterHost host = m_cluster.hosts[which[k]];
        QThread *t = QThread::create([this, k, host, task, batch, done] {
            RemoteAgent agent(host, setupFor(host.name));
            const Outcome outcome = task(agent);
            QMetaObject::invokeMethod(this, [this, k, outcome, batch, done] {
                batch->outcomes[k] = outcome;
                if (--batch->remaining > 0)
                    return;
                for (QThread *finished : std::as_const(batch->threads)) {
                    finished->wait();
                    m_threads.removeOne(finished);
                    delete finished;
                }
                done(batch->outcomes);
            }, Qt::QueuedConnection);
        });
        batch->threads.append(t);
        m_threads.append(t);
        t->start();
    }
}

void Deployer::deploy(const QByteArray &secret)
{
    m_secret = secret;
    m_endpoints.clear();
    if (m_agentProgram.isEmpty())
        m_agentProgram = LocalCluster::agentProgram();
    const bool needsUpload = std::any_of(m_cluster.hosts.begin(), m_cluster.hosts.end(),
                                         [](const ClusterHost &h) { return h.agentPath.isEmpty(); });
    if (needsUpload && m_agentProgram.isEmpty()) {
        Q_EMIT failed(QStringLiteral("dlion-agent to upload was not found; set DLION_AGENT to its path"));
        return;
    }
    runOnHosts(allHosts(), [secret](RemoteAgent &agent) {
        Outcome o;
        const auto endpoint = agent.deploy(secret, &o.error);
        o.ok = endpoint.has_value();
        if (endpoint)
            o.endpoint = *endpoint;
        return o;
    }, [this](const QList<Outcome> &outcomes) { onDeployDone(outcomes); });
}

void Deployer::onDeployDone(const QList<Outcome> &outcomes)
{
    QList<int> started;
    QString firstError;
    for (int i = 0; i < outcomes.size(); ++i) {
        if (outcomes[i].ok) {
            started.append(i);
            m_endpoints.append(outcomes[i].endpoint);
            continue;
        }
        Q_EMIT hostFailed(m_cluster.hosts[i].name, outcomes[i].error);
        if (firstError.isEmpty())
            firstError = outcomes[i].error;
    }
    if (firstError.isEmpty())
        return verifyAgents();
    m_endpoints.clear();
    stopHosts(started, [this, firstError](bool, const QString &) { Q_EMIT failed(firstError); });
}

void Deployer::verifyAgents()
{
    auto *verifier = new QObject(this);
    auto pending = std::make_shared<int>(int(m_endpoints.size()));
    for (int i = 0; i < m_endpoints.size(); ++i) {
        const QString host = m_cluster.hosts[i].name;
        auto *conn = new AgentConnection(i, m_endpoints[i].host, m_endpoints[i].port, m_secret, verifier);
        connect(conn, &AgentConnection::ready, this, [this, host, conn, verifier, pending] {
            Q_EMIT hostProgress(host, QStringLiteral("ready"),
                                QStringLiteral("agent at %1 answered with the run secret").arg(conn->endpoint()));
            if (--*pending == 0) {
                verifier->deleteLater();
                Q_EMIT deployed(m_endpoints);
            }
        });
        connect(conn, &AgentConnection::lost, this, [this, host, conn, verifier, pending](const QString &reason) {
            if (*pending <= 0)
                return;
            *pending = 0;
            verifier->deleteLater();
            const QString why = QStringLiteral("host \"%1\": the agent started but does not answer at %2 (%3); "
                                               "is a firewall blocking that port?")
                                    .arg(host, conn->endpoint(), reason);
            Q_EMIT hostFailed(host, why);
            stopHosts(allHosts(), [this, why](bool, const QString &) { Q_EMIT failed(why); });
        });
        conn->open(m_cluster.connectTimeoutS * 1000);
    }
}

QList<int> Deployer::allHosts() const
{
    QList<int> all;
    for (int i = 0; i < m_cluster.hosts.size(); ++i)
        all.append(i);
    return all;
}

void Deployer::stop() { stopHosts(allHosts(), [this](bool ok, const QString &message) { Q_EMIT stopped(ok, message); }); }

void Deployer::stopHosts(const QList<int> &hosts, const std::function<void(bool, const QString &)> &then)
{
    runOnHosts(hosts, [](RemoteAgent &agent) {
        Outcome o;
        o.ok = agent.stop(&o.error);
        return o;
    }, [this, hosts, then](const QList<Outcome> &outcomes) {
        QStringList errors;
        for (int k = 0; k < outcomes.size(); ++k) {
            if (!outcomes[k].ok) {
                Q_EMIT hostFailed(m_cluster.hosts[hosts[k]].name, outcomes[k].error);
                errors << outcomes[k].error;
            }
        }
        then(errors.isEmpty(), errors.join("; "));
    });
}

} // namespace dlion::core
