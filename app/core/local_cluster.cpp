#include "local_cluster.h"

#include <unistd.h>

#include <QCoreApplication>
#include <QDir>
#include <QFileInfo>
#include <QStandardPaths>
#include <QThread>

#include <algorithm>

namespace dlion::core {

LocalCluster::LocalCluster(QObject *parent) : QObject(parent)
{
    m_startTimer.setSingleShot(true);
    connect(&m_startTimer, &QTimer::timeout, this, [this] {
        if (!m_failed) {
            m_failed = true;
            Q_EMIT failed(QStringLiteral("no local agent became ready within %1 s (%2 of %3 ready); a loaded "
                                         "machine starts them slowly: retry, or run fewer workers")
                              .arg(m_startTimer.interval() / 1000).arg(m_ready).arg(m_ports.size()));
        }
    });
}

LocalCluster::~LocalCluster() { shutdown(0); }

QString LocalCluster::agentProgram()
{
    const QString env = qEnvironmentVariable("DLION_AGENT");
    if (!env.isEmpty())
        return QFileInfo(env).isExecutable() ? env : QString();
    const QString sibling = QDir(QCoreApplication::applicationDirPath()).filePath(QStringLiteral("dlion-agent"));
    if (QFileInfo(sibling).isExecutable())
        return sibling;
    return QStandardPaths::findExecutable(QStringLiteral("dlion-agent"));
}

void LocalCluster::start(int workers, const QByteArray &secret, int startTimeoutMs)
{
    const QString program = agentProgram();
    if (program.isEmpty()) {
        m_failed = true;
        Q_EMIT failed(QStringLiteral("dlion-agent not found next to %1 or on PATH; set DLION_AGENT to its path")
                          .arg(QCoreApplication::applicationFilePath()));
        return;
    }
    m_program = program;
    m_env = QProcessEnvironment::systemEnvironment();
    m_env.insert(QStringLiteral("DLION_SECRET"), QString::fromLatin1(secret));
    // Agents' progress reaches the user as telemetry; their logs show warnings only.
    if (!m_env.contains(QStringLiteral("QT_LOGGING_RULES")))
        m_env.insert(QStringLiteral("QT_LOGGING_RULES"), QStringLiteral("*.info=false"));
    m_ports = QList<quint16>(workers, 0);
    m_stdout = QList<QByteArray>(workers);
    m_restarting = QList<bool>(workers, false);
    m_procs.clear();
    // A few at a time, as many as there are cores: each agent spends about a
    // second of CPU loading LibTorch, so 16 started at once on 2 cores all
    // became ready only after 30 s and more. The time limit is for the next
    // agent to become ready, not for all.
    for (int i = 0; i < std::min(workers, std::max(1, QThread::idealThreadCount())); ++i)
        spawn(i);
    m_startTimer.start(startTimeoutMs);
}

void LocalCluster::spawn(int i)
{
    auto *p = new QProcess(this);
    p->setProcessEnvironment(m_env);
    p->setProcessChannelMode(QProcess::ForwardedErrorChannel);
    connect(p, &QProcess::readyReadStandardOutput, this, [this, i] { onOutput(i); });
    connect(p, &QProcess::finished, this, [this, i](int code, QProcess::ExitStatus) {
        if (m_ports[i] == 0 && !m_failed && !m_restarting[i]) {
            m_failed = true;
            Q_EMIT failed(QStringLiteral("local agent %1 exited with status %2 before it was ready").arg(i).arg(code));
        }
        Q_EMIT agentExited(i, code);
    });
    if (i == m_procs.size())
        m_procs.append(p);
    else
        m_procs[i] = p;
    QStringList args{QStringLiteral("--listen"), QString::fromLatin1(kHost) + QStringLiteral(":0"), QStringLiteral("--grace"),
                     QString::number(m_graceS)};
    if (m_graceS > 0) {
        args << QStringLiteral("--idle-exit") << QString::number(m_graceS);
        p->setChildProcessModifier([] { ::setsid(); });  // a Ctrl-C or hang-up of this terminal spares them
    } else {
        args << QStringLiteral("--exit-with-parent");
    }
    p->start(m_program, args);
}

void LocalCluster::restart(int worker)
{
    if (worker < 0 || worker >= m_procs.size() || m_program.isEmpty())
        return;
    QProcess *old = m_procs[worker];
    old->disconnect(this);
    old->kill();
    old->waitForFinished(1000);
    old->deleteLater();
    m_ports[worker] = 0;
    m_stdout[worker].clear();
    m_restarting[worker] = true;
    spawn(worker);
}

void LocalCluster::onOutput(int worker)
{
    QProcess *p = m_procs[worker];
    m_stdout[worker] += p->readAllStandardOutput();
    if (m_ports[worker] != 0)
        return;
    const int nl = int(m_stdout[worker].indexOf('\n'));
    if (nl < 0)
        return;
    const QByteArray line = m_stdout[worker].left(nl);
    const int colon = int(line.lastIndexOf(':'));
    bool ok = false;
    const uint port = colon > 0 ? line.mid(colon + 1).toUInt(&ok) : 0;
    if (!ok || port == 0 || port > 65535) {
        if (!m_failed) {
            m_failed = true;
            Q_EMIT failed(QStringLiteral("local agent %1 printed an unexpected first line: %2").arg(worker).arg(QString::fromUtf8(line)));
        }
        return;
    }
    m_ports[worker] = quint16(port);
    if (m_restarting[worker]) {
        m_restarting[worker] = false;
        Q_EMIT restarted(worker);
        return;
    }
    if (m_failed)
        return;
    if (++m_ready == m_ports.size()) {
        m_startTimer.stop();
        Q_EMIT ready();
        return;
    }
    m_startTimer.start();
    if (m_procs.size() < m_ports.size())
        spawn(int(m_procs.size()));
}

QList<AgentEndpoint> LocalCluster::endpoints() const
{
    QList<AgentEndpoint> out;
    for (quint16 port : m_ports)
        out.append({QString::fromLatin1(kHost), port});
    return out;
}

qint64 LocalCluster::pid(int worker) const
{
    return worker >= 0 && worker < m_procs.size() ? m_procs[worker]->processId() : 0;
}

void LocalCluster::kill(int worker)
{
    if (worker >= 0 && worker < m_procs.size())
        m_procs[worker]->kill();
}

void LocalCluster::release()
{
    // QProcess kills a child it still runs when deleted and cannot detach
    // one, so the handles are dropped unowned: they live until this process
    // exits, which is what a release is for.
    for (QProcess *p : std::as_const(m_procs)) {
        p->disconnect(this);
        p->setParent(nullptr);
    }
    m_procs.clear();
}

void LocalCluster::shutdown(int graceMs)
{
    for (QProcess *p : std::as_const(m_procs)) {
        if (p->state() != QProcess::NotRunning)
            p->terminate();
    }
    for (QProcess *p : std::as_const(m_procs)) {
        if (p->state() != QProcess::NotRunning && !p->waitForFinished(graceMs)) {
            p->kill();
            p->waitForFinished(1000);
        }
        p->disconnect(this);
    }
    qDeleteAll(m_procs);
    m_procs.clear();
}

} // namespace dlion::core
