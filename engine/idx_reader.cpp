#include "idx_reader.h"

#include "engine_error.h"
#include "safe_file.h"

#include <zlib.h>

#include <memory>
#include <unistd.h>

namespace dlion::engine {

namespace {
struct GzCloser {
    void operator()(gzFile f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<std::remove_pointer_t<gzFile>, GzCloser>;

// No dataset here comes near: the most bytes a header may declare.
constexpr std::size_t kMaxBytes = std::size_t(1) << 34;
// Data are read in pieces this size, so a header that overstates the length
// costs at most one piece before the shortfall shows (a .gz file's
// decompressed length is known only by reading it).
constexpr std::size_t kPiece = std::size_t(1) << 22;

// Reads exactly n bytes; false on a short read.
bool readAll(gzFile f, void *out, std::size_t n)
{
    auto *p = static_cast<unsigned char *>(out);
    while (n > 0) {
        const unsigned chunk = unsigned(std::min<std::size_t>(n, 1u << 30));
        const int got = gzread(f, p, chunk);
        if (got <= 0)
            return false;
        p += got;
        n -= std::size_t(got);
    }
    return true;
}
// Opens a regular file only (a FIFO would block, a device never end); zlib
// reads plain files transparently, so both forms are accepted.
GzFile openGz(const std::string &path)
{
    QString error;
    const int fd = files::openRegular(QString::fromStdString(path), &error);
    if (fd < 0)
        throw EngineError("dataset file: " + error.toStdString());
    GzFile f(gzdopen(fd, "rb"));
    if (!f) {
        ::close(fd);
        throw EngineError("cannot open dataset file " + path);
    }
    return f;
}

// Grows `out` to `total` bytes only as data arrive; false on a short file.
bool readData(gzFile f, std::vector<std::uint8_t> &out, std::size_t total)
{
    while (out.size() < total) {
        const std::size_t had = out.size();
        out.resize(had + std::min(total - had, kPiece));
        if (!readAll(f, out.data() + had, out.size() - had))
            return false;
    }
    return true;
}
} // namespace

IdxArray readIdx(const std::string &path)
{
    GzFile f = openGz(path);
    gzbuffer(f.get(), 1 << 20);
    unsigned char magic[4];
    if (!readAll(f.get(), magic, 4))
        throw EngineError("dataset file " + path + " is empty or truncated");
    if (magic[0] != 0 || magic[1] != 0)
        throw EngineError("dataset file " + path + " is not an IDX file (wrong magic)");
    if (magic[2] != 0x08)
        throw EngineError("dataset file " + path + " holds non-byte IDX data, which is not supported");
    const int rank = magic[3];
    if (rank < 1 || rank > 4)
        throw EngineError("dataset file " + path + " has an IDX rank of " + std::to_string(rank) + " (expected 1 to 4)");
    IdxArray out;
    std::size_t total = 1;
    for (int i = 0; i < rank; ++i) {
        unsigned char b[4];
        if (!readAll(f.get(), b, 4))
            throw EngineError("dataset file " + path + " is truncated in its header");
        const std::int64_t d = (std::int64_t(b[0]) << 24) | (b[1] << 16) | (b[2] << 8) | b[3];
        if (d <= 0 || d > (1 << 28))
            throw EngineError("dataset file " + path + " has an invalid dimension");
        out.dims.push_back(d);
        if (__builtin_mul_overflow(total, std::size_t(d), &total) || total > kMaxBytes)
            throw EngineError("dataset file " + path + " declares an implausibly large array (over "
                              + std::to_string(kMaxBytes) + " bytes)");
    }
    if (!readData(f.get(), out.data, total))
        throw EngineError("dataset file " + path + " is truncated (expected " + std::to_string(total)
                          + " data bytes); re-install it (apt-get install --reinstall dataset-fashion-mnist)");
    return out;
}

} // namespace dlion::engine
