#include "safe_file.h"

#include <QCryptographicHash>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QRandomGenerator>

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace dlion::files {

namespace {

constexpr int kTempAttempts = 8;       // a 64-bit random name collides only if planted
constexpr qint64 kReadChunk = 1 << 20;

QString osError(int err) { return QString::fromLocal8Bit(std::strerror(err)); }

// 0 once all of `bytes` is written, else the errno that stopped it.
int writeAll(int fd, const QByteArray &bytes)
{
    const char *p = bytes.constData();
    std::size_t left = std::size_t(bytes.size());
    while (left > 0) {
        const ssize_t n = ::write(fd, p, left);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n < 0 ? errno : EIO;
        p += n;
        left -= std::size_t(n);
    }
    return 0;
}

// A new owner-only file next to `path` whose name no one can guess ahead.
int createTemp(const QString &path, QByteArray *tmpPath)
{
    const QFileInfo target(path);
    for (int attempt = 0; attempt < kTempAttempts; ++attempt) {
        const QString name = QStringLiteral(".%1.%2.tmp")
                                 .arg(target.fileName())
                                 .arg(QRandomGenerator::system()->generate64(), 16, 16, QLatin1Char('0'));
        *tmpPath = QFile::encodeName(target.dir().filePath(name));
        const int fd = ::open(tmpPath->constData(), O_CREAT | O_EXCL | O_NOFOLLOW | O_WRONLY | O_CLOEXEC, 0600);
        if (fd >= 0 || errno != EEXIST)
            return fd;
    }
    return -1;
}

// The rename is durable only once its folder is synced; best effort, as the
// file itself is already complete.
void syncFolderOf(const QString &path)
{
    const int dfd = ::open(QFile::encodeName(QFileInfo(path).path()).constData(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        ::fsync(dfd);
        ::close(dfd);
    }
}

} // namespace

bool writeAtomically(const QString &path, const QByteArray &bytes, QString *error)
{
    auto fail = [&](int err) {
        *error = QStringLiteral("cannot write %1: %2").arg(path, osError(err));
        return false;
    };
    QByteArray tmp;
    const int fd = createTemp(path, &tmp);
    if (fd < 0)
        return fail(errno);
    int err = writeAll(fd, bytes);
    if (err == 0 && ::fsync(fd) != 0)
        err = errno;
    if (::close(fd) != 0 && err == 0)
        err = errno;
    if (err == 0 && ::rename(tmp.constData(), QFile::encodeName(path).constData()) != 0)
        err = errno;
    if (err != 0) {
        ::unlink(tmp.constData());
        return fail(err);
    }
    syncFolderOf(path);
    return true;
}

int openRegular(const QString &path, QString *error)
{
    // O_NONBLOCK: opening a FIFO with no writer would otherwise wait forever.
    const int fd = ::open(QFile::encodeName(path).constData(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        const int err = errno;
        *error = QStringLiteral("cannot read %1: %2").arg(path, osError(err));
        return -1;
    }
    struct stat st {};
    const bool statted = ::fstat(fd, &st) == 0;
    const int err = errno;
    if (statted && S_ISREG(st.st_mode))
        return fd;
    ::close(fd);
    *error = statted ? QStringLiteral("%1 is not a regular file (a directory, FIFO or device); give the path of a file").arg(path)
                     : QStringLiteral("cannot read %1: %2").arg(path, osError(err));
    return -1;
}

std::optional<QByteArray> readRegular(const QString &path, qint64 maxBytes, QString *error)
{
    const int fd = openRegular(path, error);
    if (fd < 0)
        return std::nullopt;
    QByteArray out;
    int err = 0;
    // Each pass reads at least one byte or ends: bounded by maxBytes + 1 bytes.
    while (err == 0 && out.size() <= maxBytes) {
        const qsizetype had = out.size();
        out.resize(had + qsizetype(std::min(kReadChunk, maxBytes + 1 - had)));
        const ssize_t n = ::read(fd, out.data() + had, std::size_t(out.size() - had));
        out.resize(had + std::max<qsizetype>(n, 0));
        if (n == 0)
            break;
        if (n < 0 && errno != EINTR)
            err = errno;
    }
    ::close(fd);
    if (err != 0) {
        *error = QStringLiteral("cannot read %1: %2").arg(path, osError(err));
        return std::nullopt;
    }
    if (out.size() > maxBytes) {
        *error = QStringLiteral("%1 is over the size limit: it may hold at most %2 bytes").arg(path).arg(maxBytes);
        return std::nullopt;
    }
    return out;
}

std::optional<QString> sha256Hex(const QString &path, QString *error)
{
    const int fd = openRegular(path, error);
    if (fd < 0)
        return std::nullopt;
    QCryptographicHash hash(QCryptographicHash::Sha256);
    QByteArray chunk(kReadChunk, Qt::Uninitialized);
    ssize_t n = 0;
    while ((n = ::read(fd, chunk.data(), std::size_t(chunk.size()))) != 0) {
        if (n > 0)
            hash.addData(QByteArrayView(chunk.constData(), n));
        else if (errno != EINTR)
            break;
    }
    const int err = n < 0 ? errno : 0;
    ::close(fd);
    if (err != 0) {
        *error = QStringLiteral("cannot read %1: %2").arg(path, osError(err));
        return std::nullopt;
    }
    return QString::fromLatin1(hash.result().toHex());
}

} // namespace dlion::files
