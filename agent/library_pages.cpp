#include "library_pages.h"

#include <QFile>
#include <QList>

#include <sys/mman.h>

namespace dlion::agent {

namespace {

struct Mapping {
    quintptr start = 0;
    quintptr end = 0;
    bool candidate = false;  // private, read-only, backed by a file
    qint64 rssKb = 0;
    qint64 anonymousKb = -1;  // -1 until smaps says
};

qint64 fieldKb(const QByteArray &line)
{
    const QList<QByteArray> parts = line.simplified().split(' ');
    return parts.size() >= 2 ? parts.at(1).toLongLong() : -1;
}

} // namespace

ReleasedPages releaseUnwrittenFilePages()
{
    QFile smaps(QStringLiteral("/proc/self/smaps"));
    if (!smaps.open(QIODevice::ReadOnly))
        return {};
    // Read everything first: madvise while reading would change what is read.
    QList<Mapping> mappings;
    // /proc files report size 0, so QFile::atEnd() holds from the start.
    const QByteArray text = smaps.readAll();
    for (const QByteArray &line : text.split('\n')) {
        const int dash = line.indexOf('-');
        const int space = line.indexOf(' ');
        if (dash > 0 && space > dash && line.at(0) != ' ' && !line.left(dash).contains(':')) {
            // "start-end perms offset dev inode [path]"
            const QList<QByteArray> parts = line.simplified().split(' ');
            Mapping m;
            bool okStart = false, okEnd = false;
            m.start = line.left(dash).toULongLong(&okStart, 16);
            m.end = line.mid(dash + 1, space - dash - 1).toULongLong(&okEnd, 16);
            const QByteArray perms = parts.value(1);
            m.candidate = okStart && okEnd && parts.size() >= 6 && parts.at(5).startsWith('/') && perms.size() == 4
                          && perms.at(1) == '-' && perms.at(3) == 'p';
            mappings.append(m);
        } else if (!mappings.isEmpty() && line.startsWith("Rss:")) {
            mappings.last().rssKb = fieldKb(line);
        } else if (!mappings.isEmpty() && line.startsWith("Anonymous:")) {
            mappings.last().anonymousKb = fieldKb(line);
        }
    }
    ReleasedPages released;
    for (const Mapping &m : std::as_const(mappings)) {
        if (!m.candidate || m.anonymousKb != 0 || m.rssKb <= 0)
            continue;
        if (madvise(reinterpret_cast<void *>(m.start), m.end - m.start, MADV_DONTNEED) == 0) {
            released.bytes += m.rssKb * 1024;
            ++released.mappings;
        }
    }
    return released;
}

} // namespace dlion::agent
