#pragma once

// A real OpenSSH server on a free loopback port, with throw-away host and
// user keys in a temporary folder. Needs root and /usr/sbin/sshd (package
// openssh-server); `skipReason()` says why it cannot run otherwise.
#include <job_builder.h>

#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTcpSocket>
#include <QTemporaryDir>
#include <QtTest>

#include <csignal>
#include <unistd.h>

namespace dlion::test {

class SshdFixture {
public:
    static constexpr const char *kSshd = "/usr/sbin/sshd";

    static QString skipReason()
    {
        if (!QFileInfo(kSshd).isExecutable())
            return QStringLiteral("needs /usr/sbin/sshd (install openssh-server with installer/install-deps.sh)");
        if (geteuid() != 0)
            return QStringLiteral("needs root to run a throw-away sshd with its own host key");
        return {};
    }

    ~SshdFixture() { stop(); }

    // Generates keys, writes the config and starts sshd; false with `why`.
    bool start(QString *why)
    {
        for (const char *key : {"host_key", "user_key", "other_user_key", "other_host_key"}) {
            if (!run("ssh-keygen", {"-q", "-t", "ed25519", "-N", "", "-C", key, "-f", path(key)}, why))
                return false;
        }
        QFile::copy(path("user_key.pub"), path("authorized_keys"));
        m_port = core::pickFreePort();
        write("sshd_config", QStringLiteral(
            "Port %1\nListenAddress 127.0.0.1\nHostKey %2\nAuthorizedKeysFile %3\nPidFile %4\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
            "PermitRootLogin prohibit-password\nSubsystem sftp internal-sftp\nLogLevel VERBOSE\n")
            .arg(m_port).arg(path("host_key"), path("authorized_keys"), path("sshd.pid")).toUtf8());
        write("known_hosts", knownHostsLine("host_key.pub"));
        write("wrong_known_hosts", knownHostsLine("other_host_key.pub"));
        QDir().mkpath("/run/sshd");  // sshd's privilege-separation folder
        if (!run(kSshd, {"-f", path("sshd_config"), "-E", path("sshd.log")}, why))
            return false;
        // sshd forks into the background; ready once its port accepts.
        for (int i = 0; i < 100; ++i) {
            QTcpSocket probe;
            probe.connectToHost(QStringLiteral("127.0.0.1"), m_port);
            if (probe.waitForConnected(100) && probe.waitForReadyRead(2000) && probe.readAll().startsWith("SSH-"))
                return true;
            QTest::qWait(50);
        }
        *why = QStringLiteral("sshd did not come up; its log: ") + QString::fromUtf8(read("sshd.log"));
        return false;
    }

    void stop()
    {
        const pid_t pid = pid_t(read("sshd.pid").trimmed().toInt());
        if (pid <= 0)
            return;
        ::kill(pid, SIGTERM);
        for (int i = 0; i < 100 && ::kill(pid, 0) == 0; ++i)
            QTest::qWait(50);
        QFile::remove(path("sshd.pid"));
    }

    QString path(const QString &name) const { return m_dir.filePath(name); }
    quint16 port() const { return m_port; }

    // "SHA256:..." of the server's host key, as `ssh-keygen -l` prints it.
    QString hostKeyFingerprint() const
    {
        QProcess p;
        p.start("ssh-keygen", {"-l", "-f", path("host_key.pub")});
        p.waitForFinished(10000);
        return QString::fromUtf8(p.readAllStandardOutput()).section(' ', 1, 1);
    }

    // A host entry of a cluster file logging in as root with the user key.
    QJsonObject host(const QString &name, const QString &workDir) const
    {
        return QJsonObject{{"name", name}, {"address", "127.0.0.1"}, {"port", m_port}, {"user", "root"},
                           {"auth", "key"}, {"key_file", path("user_key")}, {"work_dir", workDir}};
    }

    // Writes a cluster file and returns its path.
    QString writeCluster(const QString &file, const QJsonArray &hosts, const QString &knownHosts, int timeoutS = 10) const
    {
        const QJsonObject cluster{{"name", "sshd-test"}, {"known_hosts", knownHosts}, {"connect_timeout_s", timeoutS},
                                  {"rendezvous_port", core::pickFreePort()}, {"hosts", hosts}};
        QFile f(path(file));
        f.open(QIODevice::WriteOnly | QIODevice::Truncate);
        f.write(QJsonDocument(cluster).toJson());
        return f.fileName();
    }

private:
    QByteArray knownHostsLine(const QString &pubKey) const
    {
        const QList<QByteArray> parts = read(pubKey).split(' ');
        return QStringLiteral("[127.0.0.1]:%1 ").arg(m_port).toUtf8() + parts.value(0) + ' ' + parts.value(1) + '\n';
    }

    QByteArray read(const QString &name) const
    {
        QFile f(path(name));
        return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
    }

    void write(const QString &name, const QByteArray &data) const
    {
        QFile f(path(name));
        f.open(QIODevice::WriteOnly | QIODevice::Truncate);
        f.write(data);
    }

    static bool run(const QString &program, const QStringList &args, QString *why)
    {
        QProcess p;
        p.start(program, args);
        if (p.waitForFinished(20000) && p.exitStatus() == QProcess::NormalExit && p.exitCode() == 0)
            return true;
        *why = QStringLiteral("%1 failed: %2%3").arg(program, p.errorString(), QString::fromUtf8(p.readAllStandardError()));
        return false;
    }

    QTemporaryDir m_dir;
    quint16 m_port = 0;
};

} // namespace dlion::test
