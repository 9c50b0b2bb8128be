// The agent's release of unwritten file pages: what it unmaps and what it
// must leave alone, on real mappings of a real file.
#include <library_pages.h>

#include <QFile>
#include <QTemporaryDir>
#include <QTest>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

namespace {

constexpr qsizetype kSize = 8 << 20;

// Resident kB of the mapping that holds addr, from /proc/self/smaps.
qint64 residentKb(const void *addr)
{
    QFile smaps(QStringLiteral("/proc/self/smaps"));
    if (!smaps.open(QIODevice::ReadOnly))
        return -1;
    const auto where = reinterpret_cast<quintptr>(addr);
    bool inside = false;
    const QByteArray text = smaps.readAll();
    for (const QByteArray &line : text.split('\n')) {
        const int dash = line.indexOf('-');
        const int space = line.indexOf(' ');
        if (dash > 0 && space > dash && !line.left(space).contains(':')) {
            const quintptr start = line.left(dash).toULongLong(nullptr, 16);
            const quintptr end = line.mid(dash + 1, space - dash - 1).toULongLong(nullptr, 16);
            inside = start <= where && where < end;
        } else if (inside && line.startsWith("Rss:")) {
            return line.simplified().split(' ').value(1).toLongLong();
        }
    }
    return -1;
}

class Mapped
{
public:
    Mapped(const QString &path, int prot)
    {
        const int fd = ::open(QFile::encodeName(path).constData(), O_RDONLY);
        data = static_cast<char *>(mmap(nullptr, kSize, prot, MAP_PRIVATE, fd, 0));
        ::close(fd);
    }
    ~Mapped()
    {
        if (data != MAP_FAILED)
            munmap(data, kSize);
    }
    Q_DISABLE_COPY_MOVE(Mapped)
    char *data = static_cast<char *>(MAP_FAILED);
};

qint64 touch(const char *data)
{
    qint64 sum = 0;
    for (qsizetype i = 0; i < kSize; i += 4096)
        sum += static_cast<volatile const char *>(data)[i];
    return sum;
}

} // namespace

class TestLibraryPages : public QObject
{
    Q_OBJECT
private Q_SLOTS:
    void readOnlyPagesGoWrittenPagesStay()
    {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const QString path = dir.filePath(QStringLiteral("pages.bin"));
        QFile file(path);
        QVERIFY(file.open(QIODevice::WriteOnly));
        QCOMPARE(file.write(QByteArray(kSize, 'a')), kSize);
        file.close();

        // Like a library's code: read, never written.
        Mapped code(path, PROT_READ);
        // Like relocated data the loader made read-only: written, then protected.
        Mapped relro(path, PROT_READ | PROT_WRITE);
        QVERIFY(code.data != MAP_FAILED && relro.data != MAP_FAILED);
        QCOMPARE(touch(code.data), qint64(kSize / 4096) * 'a');
        for (qsizetype i = 0; i < kSize; i += 4096)
            relro.data[i] = 'z';
        QCOMPARE(mprotect(relro.data, kSize, PROT_READ), 0);
        QCOMPARE(residentKb(code.data), qint64(kSize / 1024));
        QCOMPARE(residentKb(relro.data), qint64(kSize / 1024));

        const dlion::agent::ReleasedPages released = dlion::agent::releaseUnwrittenFilePages();
        QVERIFY2(released.bytes >= kSize, qPrintable(QString::number(released.bytes)));
        QVERIFY(released.mappings >= 1);

        QCOMPARE(residentKb(code.data), qint64(0));
        QCOMPARE(residentKb(relro.data), qint64(kSize / 1024));
        // Both still read what they held: the file's bytes, and the writes.
        QCOMPARE(touch(code.data), qint64(kSize / 4096) * 'a');
        QCOMPARE(touch(relro.data), qint64(kSize / 4096) * 'z');
        QCOMPARE(residentKb(code.data), qint64(kSize / 1024));
    }
};

QTEST_GUILESS_MAIN(TestLibraryPages)
#include "tst_library_pages.moc"
