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

} // namespace dlion::engine
