#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dlion::engine {

// An unsigned-byte IDX array (the MNIST file format).
struct IdxArray {
    std::vector<std::int64_t> dims;
    std::vector<std::uint8_t> data;
};

// Reads a gzip-compressed (or plain) IDX file of unsigned bytes. Throws
// EngineError naming the file on a missing file, wrong magic, unsupported
// element type or truncated data.
IdxArray readIdx(const std::string &path);

// The dimensions of IDX file `path`, from its header (errors as readIdx).
std::vector<std::int64_t> readIdxDims(const std::string &path);

// Samples `indices` (along the first dimension; repeats allowed) of IDX file
// `path` into `out`, in the order given: out holds indices.size() times the
// bytes of one sample. The file is streamed once, in file order, so no copy
// of it is ever held (60000 Fashion-MNIST images are 47 MB; a worker of 16
// keeps 3 MB of them). Errors as readIdx, and an index past the file's count.
void readIdxSamples(const std::string &path, const std::vector<std::int64_t> &indices, std::uint8_t *out);

} // namespace dlion::engine
