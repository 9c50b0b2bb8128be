#pragma once

#include <cluster_spec.h>

#include <QObject>

#include <atomic>

namespace dlion::core {

// "Test connection" for one host: opens an SSH session on a worker thread
// (host key check against known_hosts, login) and runs `uname -srm`. Host
// key and password questions are asked on the GUI thread through the
// callbacks while the worker waits; the window never blocks on the network.
class HostProbe : public QObject {
    Q_OBJECT
public:
    using KeyQuestion = std::function<bool(const QString &host, const QString &fingerprint)>;
    using PasswordQuestion = std::function<std::optional<QByteArray>(const QString &host)>;

    // A probe still running when this object is deleted ends on its own
    // (its thread holds only a QPointer to it, tested on the GUI thread).
    HostProbe(KeyQuestion askKey, PasswordQuestion askPassword, QObject *parent = nullptr);

    void probe(const ClusterHost &host, const QString &knownHosts, int timeoutS);
    int running() const { return m_running; }

Q_SIGNALS:
    void finished(const QString &host, bool ok, const QString &message);

private:
    KeyQuestion m_askKey;
    PasswordQuestion m_askPassword;
    std::atomic<int> m_running{0};
};

} // namespace dlion::core
