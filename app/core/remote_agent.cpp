#include "remote_agent.h"

#include <dlion_version.h>
#include <QBuffer>
#include <QFile>
#include <QFileInfo>
#include <QHostAddress>
#include <QProcess>
#include <QRegularExpression>
#include <QSet>

#include <sys/utsname.h>

namespace dlion::core {

namespace {

constexpr int kCommandTimeoutMs = 30000;
constexpr int kAgentStartTimeoutS = 30;

QString localOutput(const QString &program, const QStringList &args)
{
    QProcess p;
    p.start(program, args);
    return p.waitForFinished(10000) ? QString::fromLocal8Bit(p.readAllStandardOutput()) : QString();
}

// The Debian packages that provide `sonames` here, where the agent was built
// (where ldd finds the library and dpkg knows its file).
QStringList packagesProviding(const QString &agentProgram, const QStringList &sonames)
{
    QSet<QString> packages;
    static const QRegularExpression kLine(QStringLiteral(R"(^\s*(\S+) => (/\S+))"), QRegularExpression::MultilineOption);
    for (auto it = kLine.globalMatch(localOutput("ldd", {agentProgram})); it.hasNext();) {
        const auto m = it.next();
        if (!sonames.contains(m.captured(1)))
            continue;
        const QString owner = localOutput("dpkg", {"-S", m.captured(2)}).section(':', 0, 0).trimmed();
        if (!owner.isEmpty())
            packages.insert(owner);
    }
    QStringList sorted(packages.begin(), packages.end());
    sorted.sort();
    return sorted;
}

// Shell code that sets $p to the pid in `file`, or to nothing unless the file
// holds digits only: whoever can write there must not hand kill `-9 -1`.
QString readPid(const QString &file)
{
    return QStringLiteral("p=$(cat %1 2>/dev/null); case $p in ''|*[!0-9]*) p= ;; esac").arg(file);
}

// What makes work_dir unsafe, from "uid mode owner folder" lines for it and
// each folder above it; empty if nothing. Every one must belong to `uid` or
// root; no other user may write to work_dir, nor to a folder above unless it
// is sticky (as /tmp: others cannot move the user's entries there).
QString unsafeFolder(const QStringList &folders, const QString &uid)
{
    for (int i = 0; i < folders.size(); ++i) {
        const QStringList f = folders[i].split(' ');
        const uint mode = f.value(1).toUInt(nullptr, 8);
        const bool trustedOwner = f.value(0) == QLatin1String("0") || f.value(0) == uid;
        const bool othersWrite = (mode & 022) != 0 && (i == 0 || (mode & 01000) == 0);
        if (!trustedOwner || othersWrite)
            return QStringLiteral("%1 is owned by %2 with mode %3 (%4)")
                .arg(folders[i].section(' ', 3), f.value(2), f.value(1),
                     trustedOwner ? QStringLiteral("writable by other users") : QStringLiteral("neither yours nor root's"));
    }
    return {};
}

// Shell test: $p is a running dlion-agent (pids get reused).
const QString kAgentAlive = QStringLiteral("{ [ -n \"$p\" ] && grep -q dlion-agent /proc/$p/cmdline 2>/dev/null; }");

} // namespace

RemoteAgent::RemoteAgent(ClusterHost host, Setup setup) : m_host(std::move(host)), m_setup(std::move(setup)) {}

QString RemoteAgent::homePath(const QString &path)
{
    return path.startsWith(QLatin1String("~/")) ? "\"$HOME\"/" + SshSession::shellQuote(path.mid(2)) : SshSession::shellQuote(path);
}

QString RemoteAgent::shellDir() const { return homePath(m_host.workDir + QStringLiteral("/dlion-") + m_host.name); }

QString RemoteAgent::sftpPath(const QString &path)
{
    return path.startsWith(QLatin1String("~/")) ? path.mid(2) : path;  // SFTP paths are relative to the home folder
}

QString RemoteAgent::sftpDir() const { return sftpPath(m_host.workDir + QStringLiteral("/dlion-") + m_host.name); }

QString RemoteAgent::agentCommand() const
{
    return m_host.agentPath.isEmpty() ? shellDir() + "/dlion-agent" : SshSession::shellQuote(m_host.agentPath);
}

std::optional<SshSession::ExecResult> RemoteAgent::run(SshSession &ssh, const QString &command, int timeoutMs, QString *error)
{
    auto result = ssh.exec(command, timeoutMs, error);
    if (!result)
        *error = QStringLiteral("host \"%1\": %2").arg(m_host.name, *error);
    return result;
}

bool RemoteAgent::connect(SshSession &ssh, QString *error)
{
    m_setup.progress(QStringLiteral("connect"), QStringLiteral("connecting to %1@%2:%3").arg(m_host.user, m_host.address).arg(m_host.port));
    const SshSession::Login login{m_host.address, m_host.port, m_host.user, m_host.auth,
                                  m_host.keyFile, m_setup.knownHosts, m_setup.timeoutS};
    if (ssh.open(login, m_setup.acceptKey, m_setup.password, error))
        return true;
    *error = QStringLiteral("host \"%1\": %2").arg(m_host.name, *error);
    return false;
}

std::optional<AgentEndpoint> RemoteAgent::deploy(const QByteArray &secret, QString *error)
{
    SshSession ssh;
    if (!connect(ssh, error) || !preflight(ssh, error))
        return std::nullopt;
    std::optional<AgentEndpoint> endpoint;
    if (install(ssh, secret, error) && checkLibraries(ssh, error) && uploadModel(ssh, error))
        endpoint = start(ssh, error);
    if (endpoint)
        endpoint->model = m_remoteModel;
    QString ignored;
    if (!endpoint)
        removeAgent(ssh, &ignored);  // a failed deployment leaves nothing behind
    return endpoint;
}

bool RemoteAgent::preflight(SshSession &ssh, QString *error)
{
    m_setup.progress(QStringLiteral("preflight"), QStringLiteral("checking system, disk space, work folder and earlier agents"));
    const QString workDir = homePath(m_host.workDir);
    // Folders mkdir creates are the user's alone (umask 077). Then the
    // user's id and a folder line for work_dir (as the kernel resolves it)
    // and each folder above it.
    const auto r = run(ssh, QStringLiteral(
        "uname -s; uname -m; (umask 077 && mkdir -p %1) || exit 1; df -Pk %1 | awk 'NR==2 {print $4}'; id -u; "
        "d=$(cd %1 && pwd -P) || exit 1; while :; do stat -c '%u %a %U %n' \"$d\" || exit 1; [ \"$d\" = / ] && break; "
        "d=$(dirname \"$d\"); done; %2; if %3; then echo running $p; fi")
        .arg(workDir, readPid(shellDir() + "/agent.pid"), kAgentAlive), kCommandTimeoutMs, error);
    if (!r)
        return false;
    QStringList lines = QString::fromUtf8(r->out).split('\n', Qt::SkipEmptyParts);
    utsname local{};
    ::uname(&local);  // the same names as the remote `uname -m` (Qt says arm64 where uname says aarch64)
    const QString localArch = QString::fromLatin1(local.machine);
    if (lines.size() >= 2 && (lines[0] != QLatin1String("Linux") || lines[1] != localArch)) {
        *error = QStringLiteral("host \"%1\" runs %2 on %3; the agent here is built for Linux on %4")
                     .arg(m_host.name, lines[0], lines[1], localArch);
        return false;
    }
    if (r->status != 0 || lines.size() < 5) {
        *error = QStringLiteral("host \"%1\": cannot use work_dir %2: %3").arg(m_host.name, m_host.workDir, QString::fromUtf8(r->err).trimmed());
        return false;
    }
    const QString running = lines.last().startsWith(QLatin1String("running ")) ? lines.takeLast().section(' ', 1) : QString();
    const QString unsafe = unsafeFolder(lines.mid(4), lines[3]);
    if (!unsafe.isEmpty()) {
        *error = QStringLiteral("host \"%1\": work_dir %2 is not safe: %3, so another user could swap the agent or its "
                                "files; use a work_dir in folders only you (or root) can write to, e.g. ~/dlion")
                     .arg(m_host.name, m_host.workDir, unsafe);
        return false;
    }
    const qint64 freeKb = lines[2].toLongLong();
    const qint64 neededKb = (m_host.agentPath.isEmpty() ? QFileInfo(m_setup.agentProgram).size() / 1024 : 0)
        + (m_setup.modelFile.isEmpty() ? 0 : QFileInfo(m_setup.modelFile).size() / 1024) + 64 * 1024;
    if (freeKb < neededKb) {
        *error = QStringLiteral("host \"%1\": only %2 MB free in %3; the agent needs about %4 MB")
                     .arg(m_host.name).arg(freeKb / 1024).arg(m_host.workDir).arg(neededKb / 1024);
        return false;
    }
    if (!running.isEmpty()) {
        *error = QStringLiteral("host \"%1\": an agent from an earlier deployment is still running there (pid %2); "
                                "stop it with: dlion stop --cluster FILE")
                     .arg(m_host.name, running);
        return false;
    }
    return true;
}

bool RemoteAgent::install(SshSession &ssh, const QByteArray &secret, QString *error)
{
    const auto made = run(ssh, QStringLiteral("(umask 077 && mkdir -p %1) && chmod 700 %1").arg(shellDir()), kCommandTimeoutMs, error);
    if (!made)
        return false;
    if (made->status != 0) {
        *error = QStringLiteral("host \"%1\": cannot create %2: %3").arg(m_host.name, sftpDir(), QString::fromUtf8(made->err).trimmed());
        return false;
    }
    QBuffer secretData;
    secretData.setData(secret);
    secretData.open(QIODevice::ReadOnly);
    if (!ssh.upload(secretData, sftpDir() + "/secret", 0600, error)) {
        *error = QStringLiteral("host \"%1\": %2").arg(m_host.name, *error);
        return false;
    }
    if (!m_host.agentPath.isEmpty()) {
        m_setup.progress(QStringLiteral("upload"), QStringLiteral("using the installed agent %1").arg(m_host.agentPath));
        const auto r = run(ssh, agentCommand() + " --version", kCommandTimeoutMs, error);
        if (!r)
            return false;
        const QString expected = QStringLiteral("dlion-agent " DLION_VERSION_FULL);
        if (r->status != 0 || QString::fromUtf8(r->out).trimmed() != expected) {
            *error = QStringLiteral("host \"%1\": %2 is not %3 (it says \"%4\"); install the same release or remove agent_path to upload it")
                         .arg(m_host.name, m_host.agentPath, expected, QString::fromUtf8(r->out + r->err).trimmed());
            return false;
        }
        return true;
    }
    QFile binary(m_setup.agentProgram);
    if (!binary.open(QIODevice::ReadOnly)) {
        *error = QStringLiteral("cannot read the local agent %1: %2").arg(binary.fileName(), binary.errorString());
        return false;
    }
    m_setup.progress(QStringLiteral("upload"), QStringLiteral("uploading the agent (%1 MB)").arg(binary.size() / 1e6, 0, 'f', 1));
    if (!ssh.upload(binary, sftpDir() + "/dlion-agent", 0700, error)) {
        *error = QStringLiteral("host \"%1\": %2").arg(m_host.name, *error);
        return false;
    }
    return true;
}

bool RemoteAgent::checkLibraries(SshSession &ssh, QString *error)
{
    m_setup.progress(QStringLiteral("libraries"), QStringLiteral("checking the agent's shared libraries"));
    const auto r = run(ssh, QStringLiteral("ldd %1").arg(agentCommand()), kCommandTimeoutMs, error);
    if (!r)
        return false;
    QStringList missing;
    static const QRegularExpression kMissing(QStringLiteral(R"(^\s*(\S+) => not found)"), QRegularExpression::MultilineOption);
    for (auto it = kMissing.globalMatch(QString::fromUtf8(r->out)); it.hasNext();)
        missing << it.next().captured(1);
    if (missing.isEmpty())
        return true;
    const QStringList packages = packagesProviding(m_setup.agentProgram, missing);
    *error = QStringLiteral("host \"%1\": the agent needs shared libraries missing there: %2; %3")
                 .arg(m_host.name, missing.join(", "),
                      packages.isEmpty() ? QStringLiteral("install the packages that provide them there")
                                         : QStringLiteral("install them with: sudo apt-get install -y ") + packages.join(' '));
    return false;
}

bool RemoteAgent::uploadModel(SshSession &ssh, QString *error)
{
    if (m_setup.modelFile.isEmpty())
        return true;
    const QString dir = m_host.workDir + QStringLiteral("/dlion_models");
    const QString name = m_setup.modelSha256 + QStringLiteral(".pt");
    // The folder's absolute path (the job names the file by it), then the
    // hash of a copy already there.
    const auto found = run(ssh, QStringLiteral("(umask 077 && mkdir -p %1) && cd %1 && pwd -P && { sha256sum %2 2>/dev/null || true; }")
                                    .arg(homePath(dir), name), kCommandTimeoutMs, error);
    if (!found)
        return false;
    const QStringList lines = QString::fromUtf8(found->out).split('\n', Qt::SkipEmptyParts);
    if (found->status != 0 || lines.isEmpty()) {
        *error = QStringLiteral("host \"%1\": cannot create %2: %3").arg(m_host.name, dir, QString::fromUtf8(found->err).trimmed());
        return false;
    }
    m_remoteModel = lines[0] + '/' + name;
    if (lines.value(1).section(' ', 0, 0) == m_setup.modelSha256) {
        m_setup.progress(QStringLiteral("model"), QStringLiteral("the model is on the host already: %1 (SHA-256 checked)").arg(m_remoteModel));
        return true;
    }
    QFile model(m_setup.modelFile);
    if (!model.open(QIODevice::ReadOnly)) {
        *error = QStringLiteral("cannot read the model %1: %2").arg(model.fileName(), model.errorString());
        return false;
    }
    m_setup.progress(QStringLiteral("model"), QStringLiteral("uploading the model %1 (%2 MB) to %3")
                                                  .arg(model.fileName()).arg(model.size() / 1e6, 0, 'f', 1).arg(m_remoteModel));
    // Under a name of this host's own (hosts may share a work_dir), renamed
    // into place only once its hash checks.
    const QString part = name + QStringLiteral(".part-") + m_host.name;
    if (!ssh.upload(model, sftpPath(dir) + '/' + part, 0600, error)) {
        *error = QStringLiteral("host \"%1\": %2").arg(m_host.name, *error);
        return false;
    }
    const auto checked = run(ssh, QStringLiteral("cd %1 && h=$(sha256sum <%2) && h=${h%% *} && echo \"$h\" && "
                                                 "if [ \"$h\" = %3 ]; then mv -f %2 %4; else rm -f %2; exit 5; fi")
                                      .arg(homePath(dir), part, m_setup.modelSha256, name), kCommandTimeoutMs, error);
    if (!checked)
        return false;
    if (checked->status != 0) {
        *error = QStringLiteral("host \"%1\": the model uploaded from %2 to %3 has SHA-256 \"%4\", not %5 (%6); the copy "
                                "was removed: the file changed since the run started, or the host's disk or sha256sum "
                                "failed; run again")
                     .arg(m_host.name, model.fileName(), m_remoteModel, QString::fromUtf8(checked->out).trimmed(),
                          m_setup.modelSha256, QString::fromUtf8(checked->err).trimmed());
        return false;
    }
    return true;
}

std::optional<AgentEndpoint> RemoteAgent::start(SshSession &ssh, QString *error)
{
    m_listen = m_host.listen.isEmpty() ? ssh.peerAddress() : m_host.listen;
    const QString listen = QHostAddress(m_listen).protocol() == QAbstractSocket::IPv6Protocol ? "[" + m_listen + "]" : m_listen;
    m_setup.progress(QStringLiteral("start"), QStringLiteral("starting the agent on %1:%2").arg(listen).arg(m_host.agentPort));
    const QString dir = shellDir();
    // Detached from the SSH session (setsid, no inherited descriptors), so it
    // outlives this connection; the script then waits for its ready line.
    // One arg() call: a later one would also replace "%5" inside the values.
    const QString grace = QString::number(m_setup.graceS);
    const auto r = run(ssh, QStringLiteral(
        "cd %1 && (setsid %2 --listen %3 --secret-file secret --grace %4 --idle-exit %4 </dev/null >agent.log 2>&1 & "
        "echo $! >agent.pid) && %5; i=0; while [ $i -lt %6 ]; do "
        "grep -m1 'listening on' agent.log && exit 0; "
        "kill -0 $p 2>/dev/null || { cat agent.log; exit 3; }; sleep 0.1; i=$((i+1)); done; exit 4")
        .arg(dir, agentCommand(), SshSession::shellQuote(listen + ':' + QString::number(m_host.agentPort)), grace,
             readPid(QStringLiteral("agent.pid")), QString::number(kAgentStartTimeoutS * 10)),
        (kAgentStartTimeoutS + 10) * 1000, error);
    if (!r)
        return std::nullopt;
    const QString out = QString::fromUtf8(r->out).trimmed();
    if (r->status != 0) {
        *error = r->status == 4
            ? QStringLiteral("host \"%1\": the agent did not report ready within %2 s").arg(m_host.name).arg(kAgentStartTimeoutS)
            : QStringLiteral("host \"%1\": the agent exited at start: %2").arg(m_host.name, out.isEmpty() ? QString::fromUtf8(r->err) : out);
        return std::nullopt;
    }
    bool ok = false;
    const uint port = out.section(':', -1).toUInt(&ok);
    if (!ok || port == 0 || port > 65535) {
        *error = QStringLiteral("host \"%1\": unexpected agent output: %2").arg(m_host.name, out);
        return std::nullopt;
    }
    const QHostAddress bound(m_listen);
    const QString reach = bound == QHostAddress::Any || bound == QHostAddress::AnyIPv6 ? ssh.peerAddress() : m_listen;
    m_setup.progress(QStringLiteral("started"), QStringLiteral("agent listening on %1:%2").arg(listen).arg(port));
    return AgentEndpoint{reach, quint16(port)};
}

bool RemoteAgent::stop(QString *error)
{
    SshSession ssh;
    if (!connect(ssh, error))
        return false;
    m_setup.progress(QStringLiteral("stop"), QStringLiteral("stopping the agent and removing its files"));
    if (!removeAgent(ssh, error))
        return false;
    m_setup.progress(QStringLiteral("stopped"), QStringLiteral("agent stopped, files removed"));
    return true;
}

bool RemoteAgent::removeAgent(SshSession &ssh, QString *error)
{
    const auto r = run(ssh, QStringLiteral(
        "d=%1; %2; if %3; then kill $p; i=0; "
        "while [ $i -lt 50 ] && %3; do sleep 0.1; i=$((i+1)); done; %3 && kill -9 $p; fi; rm -rf \"$d\"; "
        "[ ! -e \"$d\" ] && ! %3").arg(shellDir(), readPid(QStringLiteral("\"$d\"/agent.pid")), kAgentAlive),
        kCommandTimeoutMs, error);
    if (!r)
        return false;
    if (r->status != 0) {
        *error = QStringLiteral("host \"%1\": could not stop the agent or remove %2/dlion-%1: %3")
                     .arg(m_host.name, m_host.workDir, QString::fromUtf8(r->err).trimmed());
        return false;
    }
    return true;
}

} // namespace dlion::core
