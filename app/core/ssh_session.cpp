#include "ssh_session.h"

#include "core_log.h"

#include <QDir>
#include <QElapsedTimer>
#include <QFileInfo>
#include <QHostAddress>
#include <QIODevice>

#include <libssh/libssh.h>
#include <libssh/sftp.h>

#include <fcntl.h>
#include <sys/socket.h>

#include <memory>

namespace dlion::core {

Q_LOGGING_CATEGORY(lcSsh, "dlion.ssh", QtWarningMsg)

namespace {

template <typename T, void (*Free)(T *)>
struct Deleter {
    void operator()(T *p) const { Free(p); }
};
void freeKey(ssh_key_struct *k) { ssh_key_free(k); }
void freeChannel(ssh_channel_struct *c) { ssh_channel_free(c); }
void freeSftp(sftp_session_struct *s) { sftp_free(s); }
using KeyPtr = std::unique_ptr<ssh_key_struct, Deleter<ssh_key_struct, freeKey>>;
using ChannelPtr = std::unique_ptr<ssh_channel_struct, Deleter<ssh_channel_struct, freeChannel>>;
using SftpPtr = std::unique_ptr<sftp_session_struct, Deleter<sftp_session_struct, freeSftp>>;

QString fingerprintOf(ssh_key key)
{
    unsigned char *hash = nullptr;
    size_t len = 0;
    if (ssh_get_publickey_hash(key, SSH_PUBLICKEY_HASH_SHA256, &hash, &len) != SSH_OK)
        return QStringLiteral("(unknown)");
    char *text = ssh_get_fingerprint_hash(SSH_PUBLICKEY_HASH_SHA256, hash, len);
    const QString fp = QStringLiteral("%1 %2").arg(QLatin1String(ssh_key_type_to_char(ssh_key_type(key))), QLatin1String(text));
    ssh_string_free_char(text);
    ssh_clean_pubkey_hash(&hash);
    return fp;
}

} // namespace

SshSession::SshSession() = default;

SshSession::~SshSession()
{
    if (m_session) {
        ssh_disconnect(m_session);
        ssh_free(m_session);
    }
}

QString SshSession::lastError() const { return QString::fromUtf8(ssh_get_error(m_session)); }

QString SshSession::shellQuote(const QString &s)
{
    QString q = s;
    q.replace('\'', QLatin1String("'\\''"));
    return '\'' + q + '\'';
}

bool SshSession::open(const Login &login, const KeyPrompt &acceptKey, const PasswordPrompt &password, QString *error)
{
    m_login = login;
    m_where = QStringLiteral("%1@%2:%3").arg(login.user, login.address).arg(login.port);
    m_session = ssh_new();
    if (!m_session) {
        *error = QStringLiteral("cannot create an SSH session (out of memory?)");
        return false;
    }
    const QByteArray host = login.address.toUtf8(), user = login.user.toUtf8(), known = login.knownHosts.toUtf8();
    const unsigned int port = unsigned(login.port);
    const long timeout = login.timeoutS;
    const int no = 0, yes = 1;
    ssh_options_set(m_session, SSH_OPTIONS_HOST, host.constData());
    ssh_options_set(m_session, SSH_OPTIONS_PORT, &port);
    ssh_options_set(m_session, SSH_OPTIONS_USER, user.constData());
    ssh_options_set(m_session, SSH_OPTIONS_TIMEOUT, &timeout);
    ssh_options_set(m_session, SSH_OPTIONS_KNOWNHOSTS, known.constData());
    // The cluster file is the whole truth: no ~/.ssh/config rewriting hosts.
    ssh_options_set(m_session, SSH_OPTIONS_PROCESS_CONFIG, &no);
    // SFTP waits for each write's reply: without it Nagle stalls every one.
    ssh_options_set(m_session, SSH_OPTIONS_NODELAY, &yes);
    QElapsedTimer clock;
    clock.start();
    if (ssh_connect(m_session) != SSH_OK) {
        const QString why = lastError();
        if (clock.elapsed() >= timeout * 1000 - 500 || why.contains(QLatin1String("imeout")))
            *error = QStringLiteral("connecting to %1 timed out after %2 s (is the address right, sshd running and the port open?)")
                         .arg(m_where).arg(timeout);
        else
            *error = QStringLiteral("cannot connect to %1: %2").arg(m_where, why);
        return false;
    }
    qCInfo(lcSsh).noquote() << "connected to" << m_where;
    return verifyHostKey(acceptKey, error) && authenticate(password, error);
}

bool SshSession::verifyHostKey(const KeyPrompt &acceptKey, QString *error)
{
    ssh_key raw = nullptr;
    if (ssh_get_server_publickey(m_session, &raw) != SSH_OK) {
        *error = QStringLiteral("%1 sent no host key: %2").arg(m_where, lastError());
        return false;
    }
    const KeyPtr key(raw);
    const QString fingerprint = fingerprintOf(key.get());
    const QString hostSpec = m_login.port == 22 ? m_login.address : QStringLiteral("[%1]:%2").arg(m_login.address).arg(m_login.port);
    switch (ssh_session_is_known_server(m_session)) {
    case SSH_KNOWN_HOSTS_OK:
        return true;
    case SSH_KNOWN_HOSTS_CHANGED:
    case SSH_KNOWN_HOSTS_OTHER:
        qCWarning(lcSsh).noquote() << "host key mismatch for" << m_where << fingerprint;
        *error = QStringLiteral("REFUSED: the host key of %1 does not match the one recorded in %2 (it now offers %3). "
                                "Someone may be intercepting the connection; if the host was reinstalled, remove the old "
                                "key with: ssh-keygen -R '%4' -f %2")
                     .arg(m_where, m_login.knownHosts, fingerprint, hostSpec);
        return false;
    case SSH_KNOWN_HOSTS_UNKNOWN:
    case SSH_KNOWN_HOSTS_NOT_FOUND:
        if (!acceptKey || !acceptKey(fingerprint)) {
            *error = QStringLiteral("the host key of %1 is not in %2 and was not accepted (%3); accept it when asked, "
                                    "or add it with: ssh-keyscan -p %4 %5 >> %2")
                         .arg(m_where, m_login.knownHosts, fingerprint)
                         .arg(m_login.port)
                         .arg(m_login.address);
            return false;
        }
        QDir().mkpath(QFileInfo(m_login.knownHosts).absolutePath());
        if (ssh_session_update_known_hosts(m_session) != SSH_OK) {
            *error = QStringLiteral("cannot record the host key of %1 in %2: %3").arg(m_where, m_login.knownHosts, lastError());
            return false;
        }
        qCInfo(lcSsh).noquote() << "recorded the host key of" << m_where << fingerprint << "in" << m_login.knownHosts;
        return true;
    case SSH_KNOWN_HOSTS_ERROR:
        break;
    }
    *error = QStringLiteral("cannot check the host key of %1 against %2: %3").arg(m_where, m_login.knownHosts, lastError());
    return false;
}

bool SshSession::authenticate(const PasswordPrompt &password, QString *error)
{
    int rc = ssh_userauth_none(m_session, nullptr);
    QString method;
    if (rc != SSH_AUTH_SUCCESS) {
        switch (m_login.auth) {
        case SshAuth::KeyFile: {
            method = QStringLiteral("key file %1").arg(m_login.keyFile);
            ssh_key raw = nullptr;
            if (!QFileInfo(m_login.keyFile).isReadable()
                || ssh_pki_import_privkey_file(m_login.keyFile.toUtf8().constData(), nullptr, nullptr, nullptr, &raw) != SSH_OK) {
                *error = QStringLiteral("cannot read the private key %1 for %2 (a passphrase-protected key must be loaded "
                                        "into ssh-agent and used with auth: agent)")
                             .arg(m_login.keyFile, m_where);
                return false;
            }
            const KeyPtr key(raw);
            rc = ssh_userauth_publickey(m_session, nullptr, key.get());
            break;
        }
        case SshAuth::Agent:
            method = QStringLiteral("ssh-agent");
            if (qEnvironmentVariableIsEmpty("SSH_AUTH_SOCK")) {
                *error = QStringLiteral("auth: agent for %1, but no ssh-agent is running (SSH_AUTH_SOCK is unset)").arg(m_where);
                return false;
            }
            rc = ssh_userauth_agent(m_session, nullptr);
            break;
        case SshAuth::Password: {
            method = QStringLiteral("password");
            std::optional<QByteArray> pw = password ? password() : std::nullopt;
            if (!pw) {
                *error = QStringLiteral("no password was given for %1").arg(m_where);
                return false;
            }
            rc = ssh_userauth_password(m_session, nullptr, pw->constData());
            pw->fill('\0');
            break;
        }
        }
    }
    if (rc == SSH_AUTH_SUCCESS) {
        qCInfo(lcSsh).noquote() << "logged in to" << m_where << "with" << (method.isEmpty() ? "none" : method);
        return true;
    }
    if (rc == SSH_AUTH_ERROR) {
        *error = QStringLiteral("authentication with %1 failed: %2").arg(m_where, lastError());
        return false;
    }
    const int methods = ssh_userauth_list(m_session, nullptr);
    QStringList allowed;
    if (methods & SSH_AUTH_METHOD_PUBLICKEY)
        allowed << QStringLiteral("key/agent");
    if (methods & (SSH_AUTH_METHOD_PASSWORD | SSH_AUTH_METHOD_INTERACTIVE))
        allowed << QStringLiteral("password");
    *error = QStringLiteral("authentication failed: %1 did not accept user %2 with %3 (the server allows: %4); "
                            "check the user and that the public key is in that user's authorized_keys")
                 .arg(m_where, m_login.user, method, allowed.isEmpty() ? QStringLiteral("nothing we support") : allowed.join(", "));
    return false;
}

std::optional<SshSession::ExecResult> SshSession::exec(const QString &command, int timeoutMs, QString *error)
{
    const ChannelPtr channel(ssh_channel_new(m_session));
    if (!channel || ssh_channel_open_session(channel.get()) != SSH_OK
        || ssh_channel_request_exec(channel.get(), command.toUtf8().constData()) != SSH_OK) {
        *error = QStringLiteral("cannot run a command on %1: %2").arg(m_where, lastError());
        return std::nullopt;
    }
    ExecResult result;
    QElapsedTimer clock;
    clock.start();
    char buf[16384];
    for (;;) {
        const int n = ssh_channel_read_timeout(channel.get(), buf, sizeof buf, 0, 100);
        if (n > 0)
            result.out.append(buf, n);
        int m = 0;
        while (n >= 0 && (m = ssh_channel_read_nonblocking(channel.get(), buf, sizeof buf, 1)) > 0)
            result.err.append(buf, m);
        if (n == SSH_ERROR || m == SSH_ERROR) {
            *error = QStringLiteral("connection to %1 broke while running a command: %2").arg(m_where, lastError());
            return std::nullopt;
        }
        if (n == 0 && ssh_channel_is_eof(channel.get()))
            break;
        if (clock.elapsed() > timeoutMs) {
            *error = QStringLiteral("a command on %1 did not finish within %2 s").arg(m_where).arg(timeoutMs / 1000);
            ssh_channel_close(channel.get());
            return std::nullopt;
        }
    }
    result.status = ssh_channel_get_exit_status(channel.get());
    ssh_channel_close(channel.get());
    qCDebug(lcSsh).noquote() << m_where << "ran" << command << "->" << result.status;
    return result;
}

bool SshSession::upload(QIODevice &source, const QString &remotePath, int mode, QString *error)
{
    const SftpPtr sftp(sftp_new(m_session));
    if (!sftp || sftp_init(sftp.get()) != SSH_OK) {
        *error = QStringLiteral("cannot start SFTP on %1 (is the sftp subsystem enabled in sshd?): %2").arg(m_where, lastError());
        return false;
    }
    sftp_file file = sftp_open(sftp.get(), remotePath.toUtf8().constData(), O_WRONLY | O_CREAT | O_TRUNC, mode_t(mode));
    if (!file) {
        *error = QStringLiteral("cannot create %1 on %2: %3").arg(remotePath, m_where, lastError());
        return false;
    }
    bool ok = true;
    while (ok && !source.atEnd()) {
        const QByteArray chunk = source.read(1 << 16);
        for (qsizetype done = 0; ok && done < chunk.size();) {
            const ssize_t n = sftp_write(file, chunk.constData() + done, size_t(chunk.size() - done));
            ok = n > 0;
            done += n;
        }
    }
    if (!ok)
        *error = QStringLiteral("writing %1 on %2 failed (disk full?): %3").arg(remotePath, m_where, lastError());
    sftp_close(file);
    return ok;
}

QString SshSession::peerAddress() const
{
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    if (!m_session || getpeername(ssh_get_fd(m_session), reinterpret_cast<sockaddr *>(&addr), &len) != 0)
        return {};
    return QHostAddress(reinterpret_cast<sockaddr *>(&addr)).toString();
}

} // namespace dlion::core
