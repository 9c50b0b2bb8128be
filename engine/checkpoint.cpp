#include "checkpoint.h"

#include "engine_error.h"
#include "safe_file.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>

#include <zlib.h>

#include <cstring>

namespace dlion::engine {

namespace {

constexpr char kMagic[8] = {'D', 'L', 'C', 'K', 'P', 'T', '0', '1'};
constexpr std::uint32_t kVersion = 2;
constexpr std::uint32_t kOldestVersion = 1;  // no buffers
// Far above any model here; read incrementally, so only a bound on a runaway file.
constexpr qint64 kMaxBytes = qint64(1) << 34;

QString pattern(int worker) { return QStringLiteral("worker-%1-round-*.ckpt").arg(worker); }

template <typename T>
void put(QByteArray &out, const T &v)
{
    out.append(reinterpret_cast<const char *>(&v), sizeof v);
}

// Reads the fields in order; any read past the end marks the file truncated.
class Cursor {
public:
    explicit Cursor(const QByteArray &b) : m_b(b) {}
    template <typename T>
    T get()
    {
        T v{};
        take(&v, sizeof v);
        return v;
    }
    void take(void *dst, std::size_t n)
    {
        if (m_pos + n > std::size_t(m_b.size())) {
            m_short = true;
            return;
        }
        std::memcpy(dst, m_b.constData() + m_pos, n);
        m_pos += n;
    }
    bool truncated() const { return m_short; }

private:
    const QByteArray &m_b;
    std::size_t m_pos = 0;
    bool m_short = false;
};

std::uint32_t crcOf(const char *p, std::size_t n) { return std::uint32_t(crc32(0, reinterpret_cast<const Bytef *>(p), uInt(n))); }

} // namespace

Checkpoint Checkpoint::load(const QString &path)
{
    auto fail = [&](const QString &why) { return EngineError(QStringLiteral("checkpoint %1: %2").arg(path, why).toStdString()); };
    QString error;
    const std::optional<QByteArray> loaded = files::readRegular(path, kMaxBytes, &error);
    if (!loaded)
        throw EngineError(QStringLiteral("checkpoint: %1").arg(error).toStdString());
    const QByteArray &bytes = *loaded;
    if (bytes.size() < qsizetype(sizeof kMagic) || std::memcmp(bytes.constData(), kMagic, sizeof kMagic) != 0)
        throw fail(QStringLiteral("not a DLion checkpoint (bad magic)"));
    Cursor c(bytes);
    char magic[sizeof kMagic];
    c.take(magic, sizeof magic);
    const auto version = c.get<std::uint32_t>();
    if (!c.truncated() && (version < kOldestVersion || version > kVersion))
        throw fail(QStringLiteral("format version %1; this build reads versions %2 to %3").arg(version).arg(kOldestVersion).arg(kVersion));
    Checkpoint out;
    out.worker = int(c.get<std::uint32_t>());
    out.round = c.get<std::int64_t>();
    out.elapsedS = c.get<double>();
    const auto nameLen = c.get<std::uint32_t>();
    const auto count = c.get<std::uint64_t>();
    // Sizes come from the file: check them against its length before allocating.
    const std::uint64_t need = std::uint64_t(nameLen) + 2 * count * sizeof(float) + sizeof(std::uint32_t);
    if (c.truncated() || count > std::uint64_t(bytes.size()) || need > std::uint64_t(bytes.size()))
        throw fail(QStringLiteral("truncated (%1 bytes)").arg(bytes.size()));
    QByteArray name(qsizetype(nameLen), '\0');
    c.take(name.data(), nameLen);
    out.model = QString::fromUtf8(name);
    out.params.resize(count);
    out.momentum.resize(count);
    c.take(out.params.data(), count * sizeof(float));
    c.take(out.momentum.data(), count * sizeof(float));
    if (version >= 2) {
        const auto buffers = c.get<std::uint64_t>();
        if (c.truncated() || buffers > std::uint64_t(bytes.size()) / sizeof(float))
            throw fail(QStringLiteral("truncated (%1 bytes)").arg(bytes.size()));
        out.buffers.resize(buffers);
        c.take(out.buffers.data(), buffers * sizeof(float));
    }
    const auto crc = c.get<std::uint32_t>();
    if (c.truncated())
        throw fail(QStringLiteral("truncated (%1 bytes)").arg(bytes.size()));
    const std::size_t body = std::size_t(bytes.size()) - sizeof crc;
    if (crcOf(bytes.constData(), body) != crc)
        throw fail(QStringLiteral("CRC mismatch: the file is corrupted"));
    return out;
}

QString Checkpoint::latest(const QString &path, int worker)
{
    const QFileInfo info(path);
    if (info.isFile())
        return info.absoluteFilePath();
    if (!info.isDir())
        throw EngineError(QStringLiteral("resume_from %1: no such file or directory").arg(path).toStdString());
    // Zero-padded rounds: the last name is the newest checkpoint.
    const QStringList files = QDir(path).entryList({pattern(worker)}, QDir::Files, QDir::Name);
    if (files.isEmpty())
        throw EngineError(QStringLiteral("resume_from %1: no checkpoint of worker %2 there").arg(path).arg(worker).toStdString());
    return QDir(path).absoluteFilePath(files.last());
}

Checkpointer::Checkpointer(QString dir, int worker, int keep) : m_dir(std::move(dir)), m_worker(worker), m_keep(keep) {}

QString Checkpointer::fileName(int worker, std::int64_t round)
{
    return QStringLiteral("worker-%1-round-%2.ckpt").arg(worker).arg(round, 12, 10, QLatin1Char('0'));
}

QString Checkpointer::save(const Checkpoint &c)
{
    QByteArray buf;
    buf.reserve(qsizetype(64 + 2 * c.params.size() * sizeof(float)));
    buf.append(kMagic, sizeof kMagic);
    put(buf, kVersion);
    put(buf, std::uint32_t(c.worker));
    put(buf, c.round);
    put(buf, c.elapsedS);
    const QByteArray name = c.model.toUtf8();
    put(buf, std::uint32_t(name.size()));
    put(buf, std::uint64_t(c.params.size()));
    buf.append(name);
    buf.append(reinterpret_cast<const char *>(c.params.data()), qsizetype(c.params.size() * sizeof(float)));
    buf.append(reinterpret_cast<const char *>(c.momentum.data()), qsizetype(c.momentum.size() * sizeof(float)));
    put(buf, std::uint64_t(c.buffers.size()));
    buf.append(reinterpret_cast<const char *>(c.buffers.data()), qsizetype(c.buffers.size() * sizeof(float)));
    put(buf, crcOf(buf.constData(), std::size_t(buf.size())));

    if (!QDir().mkpath(m_dir))
        return QStringLiteral("cannot create checkpoint directory %1").arg(m_dir);
    if (QString error; !files::writeAtomically(QDir(m_dir).filePath(fileName(m_worker, c.round)), buf, &error))
        return QStringLiteral("checkpoint: %1").arg(error);
    QStringList files = QDir(m_dir).entryList({pattern(m_worker)}, QDir::Files, QDir::Name);
    for (qsizetype i = 0; i + m_keep < files.size(); ++i)
        QFile::remove(QDir(m_dir).filePath(files[i]));
    return {};
}

} // namespace dlion::engine
