#include "console_deployer.h"

#include <QTextStream>

#include <termios.h>
#include <unistd.h>

namespace dlion::cli {

namespace {

QString readLine(bool echo)
{
    termios saved{};
    const bool hide = !echo && tcgetattr(STDIN_FILENO, &saved) == 0;
    if (hide) {
        termios quiet = saved;
        quiet.c_lflag &= ~tcflag_t(ECHO);
        tcsetattr(STDIN_FILENO, TCSANOW, &quiet);
    }
    QTextStream in(stdin);
    const QString line = in.readLine();
    if (hide) {
        tcsetattr(STDIN_FILENO, TCSANOW, &saved);
        QTextStream(stderr) << "\n";
    }
    return line;
}

} // namespace

bool ConsoleDeployer::load(const QString &clusterFile, bool acceptNewHostKeys, bool quiet, QString *error)
{
    auto spec = core::ClusterSpec::load(clusterFile, error);
    if (!spec)
        return false;
    m_owned = std::make_unique<core::Deployer>(*spec);
    m_deployer = m_owned.get();
    m_interactive = isatty(STDIN_FILENO) && isatty(STDERR_FILENO);
    using Policy = core::Deployer::HostKeyPolicy;
    m_deployer->setHostKeyPolicy(acceptNewHostKeys ? Policy::AcceptNew : m_interactive ? Policy::Ask : Policy::RefuseNew);
    connect(m_deployer, &core::Deployer::hostKeyUnknown, this, &ConsoleDeployer::askHostKey);
    connect(m_deployer, &core::Deployer::passwordRequested, this, &ConsoleDeployer::askPassword);
    connect(m_deployer, &core::Deployer::hostFailed, this, [](const QString &, const QString &reason) {
        QTextStream(stderr) << "dlion: " << reason << "\n";
    });
    if (!quiet) {
        connect(m_deployer, &core::Deployer::hostProgress, this,
                [](const QString &host, const QString &stage, const QString &message) {
                    QTextStream(stdout) << "[" << host << "] " << stage << ": " << message << Qt::endl;
                });
    }
    return true;
}

bool ConsoleDeployer::applyTo(QJsonObject &overrides, QString *error) const
{
    const QList<core::ClusterHost> &hosts = cluster().hosts;
    if (overrides.contains("workers") && overrides.value("workers").toInt() != hosts.size()) {
        *error = QStringLiteral("--workers %1 conflicts with the cluster file's %2 hosts (one worker per host); leave it out")
                     .arg(overrides.value("workers").toInt()).arg(hosts.size());
        return false;
    }
    QJsonObject fromCluster = cluster().jobOverrides();
    if (overrides.contains("emulation")) {  // emulation flags given: the hosts' link caps fill in only the links
        QJsonObject emulation = overrides.value("emulation").toObject();
        if (!emulation.contains("links") && fromCluster.contains("emulation.links"))
            emulation.insert("links", fromCluster.value("emulation.links"));
        overrides.insert("emulation", emulation);
        fromCluster.remove("emulation.links");
    }
    for (auto it = fromCluster.begin(); it != fromCluster.end(); ++it) {
        if (it.key() == QLatin1String("workers") || !overrides.contains(it.key()))
            overrides.insert(it.key(), it.value());
    }
    return true;
}

void ConsoleDeployer::askHostKey(const QString &host, const QString &fingerprint)
{
    QTextStream(stderr) << "host \"" << host << "\" is not in the known hosts file; its key is\n  " << fingerprint
                        << "\nTrust it and record it? [y/N] " << Qt::flush;
    const QString answer = readLine(true).trimmed().toLower();
    m_deployer->answerHostKey(host, answer == QLatin1String("y") || answer == QLatin1String("yes"));
}

void ConsoleDeployer::askPassword(const QString &host)
{
    if (!m_interactive) {
        QTextStream(stderr) << "dlion: host \"" << host << "\" needs a password but there is no terminal to ask on; "
                            << "use auth: key or auth: agent for unattended runs\n";
        m_deployer->answerPassword(host, {});
        return;
    }
    QTextStream(stderr) << "password for host \"" << host << "\": " << Qt::flush;
    m_deployer->answerPassword(host, readLine(false));
}

} // namespace dlion::cli
