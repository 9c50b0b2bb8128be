#include "host_probe.h"

#include <ssh_session.h>

#include <QCoreApplication>
#include <QPointer>
#include <QThread>

namespace dlion::core {

HostProbe::HostProbe(KeyQuestion askKey, PasswordQuestion askPassword, QObject *parent)
    : QObject(parent), m_askKey(std::move(askKey)), m_askPassword(std::move(askPassword))
{
}

void HostProbe::probe(const ClusterHost &host, const QString &knownHosts, int timeoutS)
{
    ++m_running;
    QPointer<HostProbe> self(this);
    // Runs a question on the GUI thread and waits for the answer. The call
    // goes to the application object, which outlives every probe, and
    // `self` is only tested there: on the GUI thread, where the probe is
    // deleted, so the test cannot race with the deletion.
    auto onGui = [self](auto question, auto fallback) {
        decltype(fallback) answer = fallback;
        QMetaObject::invokeMethod(
            QCoreApplication::instance(), [&] { answer = self ? question() : fallback; }, Qt::BlockingQueuedConnection);
        return answer;
    };
    QThread *thread = QThread::create([self, host, knownHosts, timeoutS, onGui] {
        SshSession ssh;
        const SshSession::Login login{host.address, host.port, host.user, host.auth, host.keyFile, knownHosts, timeoutS};
        auto acceptKey = [&](const QString &fingerprint) {
            return onGui([&] { return self && self->m_askKey(host.name, fingerprint); }, false);
        };
        auto password = [&]() {
            return onGui([&] { return self ? self->m_askPassword(host.name) : std::nullopt; }, std::optional<QByteArray>());
        };
        QString error;
        bool ok = ssh.open(login, acceptKey, password, &error);
        QString message;
        if (ok) {
            const auto result = ssh.exec(QStringLiteral("uname -srm"), timeoutS * 1000, &error);
            ok = result && result->status == 0;
            message = ok ? QObject::tr("Connected: %1").arg(QString::fromUtf8(result->out).trimmed())
                         : QObject::tr("Logged in, but running a command failed: %1").arg(error);
        } else {
            message = error;
        }
        QMetaObject::invokeMethod(QCoreApplication::instance(), [self, name = host.name, ok, message] {
            if (self) {
                --self->m_running;
                Q_EMIT self->finished(name, ok, message);
            }
        });
    });
    connect(thread, &QThread::finished, thread, &QObject::deleteLater);
    thread->start();
}

} // namespace dlion::core
