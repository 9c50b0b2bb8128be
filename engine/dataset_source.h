#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dlion::engine {

enum class Split { Train, Test };

// A labelled dataset before it becomes tensors: images as bytes, or float
// features (tabular rows are (1, 1, features)).
struct RawDataset {
    std::int64_t size = 0;
    int channels = 1;
    int height = 28;
    int width = 28;
    int classes = 10;
    bool floats = false;               // samples in `values`, not `pixels`
    std::vector<std::uint8_t> pixels;  // size * channels * height * width, NCHW
    // An IDX file whose samples stay there until copySamples reads the ones
    // asked for (then `pixels` is empty).
    std::string pixelFile;
    std::vector<float> values;         // the same layout, for float data
    std::vector<std::uint8_t> labels;  // size
    float mean = 0.5f;  // per-pixel normalisation of bytes, in [0, 1] units
    float std = 0.5f;

    std::int64_t sampleBytes() const { return std::int64_t(channels) * height * width; }
    // Samples `indices`, in that order, into `out`: sampleBytes() bytes each,
    // or as many floats for float data.
    void copySamples(const std::vector<std::int64_t> &indices, void *out) const;
    // Samples per label, `classes` entries.
    std::vector<std::int64_t> classHistogram() const;
};

// Where the Debian package dataset-fashion-mnist installs its files.
inline constexpr const char *kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

// Loads "fashion-mnist", "mnist" (IDX files), "cifar10" (the binary
// version's data_batch_N.bin / test_batch.bin), "synthetic" (generated,
// learnable in seconds), "shapes" (generated 32x32 RGB shapes, CIFAR-10's
// size; a CNN needs minutes), or the user formats of dataset_files.h:
// "imagefolder" (dir/train/<class>/, dir/test/<class>/), "csv"
// (dir/train.csv, dir/test.csv) and "npy" (dir/train/x.npy and y.npy,
// dir/test/...). `dir` empty means the package default. `classNames`, when
// given, fixes the user formats' labels and class count (hosts holding
// different classes still build one model). Throws EngineError naming the
// missing or corrupt file and how to get it.
RawDataset loadDataset(const std::string &name, const std::string &dir, Split split,
                       const std::vector<std::string> &classNames = {});

// Labels and class count from whole-number label values read from `file`:
// below classNames.size() when names are given, else classes = max + 1.
void assignLabels(RawDataset &d, const std::vector<std::int64_t> &labels, const std::vector<std::string> &classNames,
                  const std::string &file);
// Sets mean and std from the pixel bytes (in [0, 1] units).
void setPixelStats(RawDataset &d);

} // namespace dlion::engine
