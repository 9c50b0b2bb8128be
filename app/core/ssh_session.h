#pragma once

#include "cluster_spec.h"

#include <QByteArray>
#include <QString>

#include <functional>
#include <optional>

class QIODevice;

struct ssh_session_struct;

namespace dlion::core {

// One blocking SSH connection (libssh), used from one thread at a time.
//
// `open()` connects within the timeout, checks the server's host key
// against the known_hosts file (an unknown key is accepted only if
// `acceptKey(fingerprint)` says so, and is then recorded; a changed key is
// always refused), then logs in. Every failure returns false with a one-line
// message that says what to do. The connection closes with the object.
class SshSession {
public:
    struct Login {
        QString address;
        int port = 22;
        QString user;
        SshAuth auth = SshAuth::Agent;
        QString keyFile;
        QString knownHosts;
        int timeoutS = 10;
    };
    struct ExecResult {
        int status = -1;
        QByteArray out;
        QByteArray err;
    };
    using KeyPrompt = std::function<bool(const QString &fingerprint)>;
    using PasswordPrompt = std::function<std::optional<QByteArray>()>;

    SshSession();
    ~SshSession();
    SshSession(const SshSession &) = delete;
    SshSession &operator=(const SshSession &) = delete;

    bool open(const Login &login, const KeyPrompt &acceptKey, const PasswordPrompt &password, QString *error);
    // Runs `command` through the remote shell; nullopt if it could not run
    // or did not end within the timeout.
    std::optional<ExecResult> exec(const QString &command, int timeoutMs, QString *error);
    // Writes everything `source` holds to `remotePath` over SFTP.
    bool upload(QIODevice &source, const QString &remotePath, int mode, QString *error);
    // The numeric address the connection reached.
    QString peerAddress() const;

    static QString shellQuote(const QString &s);

private:
    bool verifyHostKey(const KeyPrompt &acceptKey, QString *error);
    bool authenticate(const PasswordPrompt &password, QString *error);
    QString lastError() const;

    ssh_session_struct *m_session = nullptr;
    Login m_login;
    QString m_where;  // "user@address:port" for messages
};

} // namespace dlion::core
