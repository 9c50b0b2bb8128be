#pragma once

// The processes a test's child started, seen through /proc, and the runs
// that start them.
#include <QDir>
#include <QFile>
#include <QList>
#include <QProcess>
#include <QSet>
#include <QtTest>

namespace dlion::test {

inline QList<qint64> childPids(qint64 pid)
{
    QList<qint64> out;
    QDir tasks(QString("/proc/%1/task").arg(pid));
    for (const QString &tid : tasks.entryList(QDir::Dirs | QDir::NoDotAndDotDot)) {
        QFile f(tasks.filePath(tid + "/children"));
        if (f.open(QIODevice::ReadOnly)) {
            for (const QByteArray &c : f.readAll().split(' ')) {
                if (!c.trimmed().isEmpty())
                    out.append(c.trimmed().toLongLong());
            }
        }
    }
    return out;
}

// The TCP ports process `pid` listens on: its socket inodes matched
// against the kernel's tables of listening sockets.
inline QList<quint16> listeningPorts(qint64 pid)
{
    QSet<QByteArray> inodes;
    QDir fds(QString("/proc/%1/fd").arg(pid));
    for (const QFileInfo &fd : fds.entryInfoList(QDir::System | QDir::NoDotAndDotDot)) {
        const QString target = fd.symLinkTarget().section('/', -1);
        if (target.startsWith("socket:["))
            inodes.insert(target.mid(8).chopped(1).toLatin1());
    }
    QList<quint16> ports;
    for (const char *table : {"tcp", "tcp6"}) {
        QFile f(QString("/proc/%1/net/%2").arg(pid).arg(table));
        if (!f.open(QIODevice::ReadOnly))
            continue;
        f.readLine();  // the column names
        while (!f.atEnd()) {
            const QList<QByteArray> cols = f.readLine().simplified().split(' ');
            // local_address is HEX_IP:HEX_PORT; state 0A is LISTEN.
            if (cols.size() > 9 && cols[3] == "0A" && inodes.contains(cols[9]))
                ports.append(quint16(cols[1].mid(cols[1].lastIndexOf(':') + 1).toUInt(nullptr, 16)));
        }
    }
    return ports;
}

// Starts `dlion ARGS` and waits up to `timeoutMs` until its agents train (a
// progress line shows their rates); *seen gets its output so far and
// *agents the agents' pids.
inline void startTrainingRun(QProcess &p, const QStringList &args, int timeoutMs, QByteArray *seen, QList<qint64> *agents)
{
    p.start(qEnvironmentVariable("DLION_CLI"), args);
    QVERIFY(p.waitForStarted());
    QTRY_VERIFY_WITH_TIMEOUT((*seen += p.readAllStandardOutput()).contains("samples/s"), timeoutMs);
    *agents = childPids(p.processId());
}

// Waits until the started dlion-agent `agent` has printed its first line,
// "... listening on HOST:PORT", and sets *port from it.
inline void readAgentPort(QProcess &agent, quint16 *port)
{
    QVERIFY(agent.waitForStarted(10000));
    QTRY_VERIFY_WITH_TIMEOUT(agent.canReadLine(), 30000);
    const QByteArray line = agent.readLine().trimmed();
    *port = quint16(line.mid(line.lastIndexOf(':') + 1).toUInt());
    QVERIFY2(*port != 0, line.constData());
}

inline bool alive(qint64 pid)
{
    // A zombie has exited; only its parent's wait() is missing.
    QFile f(QString("/proc/%1/stat").arg(pid));
    return f.open(QIODevice::ReadOnly) && !f.readAll().contains(") Z ");
}

} // namespace dlion::test
