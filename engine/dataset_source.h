#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dlion::engine {

enum class Split { Train, Test };

// A labelled image dataset held as bytes, before it becomes tensors.
struct RawDataset {
    std::int64_t size = 0;
    int channels = 1;
    int height = 28;
    int width = 28;
    int classes = 10;
    std::vector<std::uint8_t> pixels;  // size * channels * height * width, NCHW
    std::vector<std::uint8_t> labels;  // size
    float mean = 0.5f;  // per-pixel normalisation, in [0, 1] units
    float std = 0.5f;

    std::int64_t sampleBytes() const { return std::int64_t(channels) * height * width; }
};

// Where the Debian package dataset-fashion-mnist installs its files.
inline constexpr const char *kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

// Loads "fashion-mnist", "mnist" (IDX files), "cifar10" (the binary
// version's data_batch_N.bin / test_batch.bin), "synthetic" (generated,
// learnable in seconds) or "shapes" (generated 32x32 RGB shapes, CIFAR-10's
// size; a CNN needs minutes). `dir` empty means the package default. Throws
// EngineError naming the missing or corrupt file and how to get it.
RawDataset loadDataset(const std::string &name, const std::string &dir, Split split);

} // namespace dlion::engine
