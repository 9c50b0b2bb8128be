#pragma once

// The processes a test's child started, seen through /proc.
#include <QDir>
#include <QFile>
#include <QList>

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

inline bool alive(qint64 pid)
{
    // A zombie has exited; only its parent's wait() is missing.
    QFile f(QString("/proc/%1/stat").arg(pid));
    return f.open(QIODevice::ReadOnly) && !f.readAll().contains(") Z ");
}

} // namespace dlion::test
