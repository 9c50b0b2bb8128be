#include "idx_reader.h"

#include "engine_error.h"
#include "safe_file.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>
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

// An open IDX file positioned at its first data byte.
struct IdxStream {
    GzFile file;
    std::vector<std::int64_t> dims;
    std::size_t total = 1;  // data bytes the header declares
};

IdxStream openIdx(const std::string &path)
{
    IdxStream s{openGz(path), {}, 1};
    gzFile f = s.file.get();
    gzbuffer(f, 1 << 20);
    unsigned char magic[4];
    if (!readAll(f, magic, 4))
        throw EngineError("dataset file " + path + " is empty or truncated");
    if (magic[0] != 0 || magic[1] != 0)
        throw EngineError("dataset file " + path + " is not an IDX file (wrong magic)");
    if (magic[2] != 0x08)
        throw EngineError("dataset file " + path + " holds non-byte IDX data, which is not supported");
    const int rank = magic[3];
    if (rank < 1 || rank > 4)
        throw EngineError("dataset file " + path + " has an IDX rank of " + std::to_string(rank) + " (expected 1 to 4)");
    for (int i = 0; i < rank; ++i) {
        unsigned char b[4];
        if (!readAll(f, b, 4))
            throw EngineError("dataset file " + path + " is truncated in its header");
        const std::int64_t d = (std::int64_t(b[0]) << 24) | (b[1] << 16) | (b[2] << 8) | b[3];
        if (d <= 0 || d > (1 << 28))
            throw EngineError("dataset file " + path + " has an invalid dimension");
        s.dims.push_back(d);
        if (__builtin_mul_overflow(s.total, std::size_t(d), &s.total) || s.total > kMaxBytes)
            throw EngineError("dataset file " + path + " declares an implausibly large array (over "
                              + std::to_string(kMaxBytes) + " bytes)");
    }
    return s;
}

EngineError truncated(const std::string &path, std::size_t total)
{
    return EngineError("dataset file " + path + " is truncated (expected " + std::to_string(total)
                       + " data bytes); re-install it (apt-get install --reinstall dataset-fashion-mnist)");
}
} // namespace

IdxArray readIdx(const std::string &path)
{
    IdxStream s = openIdx(path);
    IdxArray out{std::move(s.dims), {}};
    if (!readData(s.file.get(), out.data, s.total))
        throw truncated(path, s.total);
    return out;
}

std::vector<std::int64_t> readIdxDims(const std::string &path)
{
    return openIdx(path).dims;
}

void readIdxSamples(const std::string &path, const std::vector<std::int64_t> &indices, std::uint8_t *out)
{
    IdxStream s = openIdx(path);
    const std::int64_t count = s.dims[0];
    const std::size_t item = s.total / std::size_t(count);
    // Visit the samples in file order, so the stream only ever goes forward.
    std::vector<std::size_t> order(indices.size());
    std::iota(order.begin(), order.end(), std::size_t(0));
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return indices[a] < indices[b]; });
    std::int64_t next = 0;  // the sample the stream is at
    const std::uint8_t *last = nullptr;
    for (const std::size_t k : order) {
        const std::int64_t i = indices[k];
        if (i < 0 || i >= count)
            throw EngineError("dataset file " + path + " holds " + std::to_string(count) + " samples; sample "
                              + std::to_string(i) + " was asked for");
        std::uint8_t *dst = out + k * item;
        if (i < next) {  // the same sample again
            std::memcpy(dst, last, item);
            continue;
        }
        if (i > next && gzseek(s.file.get(), z_off_t(std::size_t(i - next) * item), SEEK_CUR) < 0)
            throw truncated(path, s.total);
        if (!readAll(s.file.get(), dst, item))
            throw truncated(path, s.total);
        next = i + 1;
        last = dst;
    }
}

} // namespace dlion::engine
