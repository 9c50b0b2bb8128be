#include "dataset_source.h"

#include "dataset_files.h"
#include "engine_error.h"
#include "idx_reader.h"
#include "safe_file.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

namespace dlion::engine {

namespace {

// A CIFAR-10 batch file is 30.7 MB; far more is not one.
constexpr qint64 kMaxCifarFileBytes = qint64(1) << 30;

RawDataset loadIdxPair(const std::string &dir, const std::string &prefix, const std::string &what,
                       const std::string &howToGet)
{
    const std::string images = dir + "/" + prefix + "-images-idx3-ubyte.gz";
    const std::string labels = dir + "/" + prefix + "-labels-idx1-ubyte.gz";
    for (const std::string &p : {images, labels}) {
        if (!std::filesystem::exists(p))
            throw EngineError(what + " not found: " + p + " is missing; " + howToGet);
    }
    const std::vector<std::int64_t> dims = readIdxDims(images);
    IdxArray lab = readIdx(labels);
    if (dims.size() != 3 || lab.dims.size() != 1 || dims[0] != lab.dims[0])
        throw EngineError(what + " files in " + dir + " do not match (images " + std::to_string(dims[0])
                          + " vs labels " + std::to_string(lab.dims[0]) + ")");
    RawDataset d;
    d.size = dims[0];
    d.height = int(dims[1]);
    d.width = int(dims[2]);
    d.pixelFile = images;
    d.labels = std::move(lab.data);
    for (auto l : d.labels) {
        if (l >= d.classes)
            throw EngineError(what + " labels in " + labels + " are out of range (corrupt file)");
    }
    return d;
}

RawDataset loadCifar10(const std::string &dir, Split split)
{
    if (dir.empty())
        throw EngineError("cifar10 needs data_dir: the folder of the binary CIFAR-10 files (data_batch_1.bin ...)");
    std::vector<std::string> files;
    if (split == Split::Train) {
        for (int i = 1; i <= 5; ++i)
            files.push_back(dir + "/data_batch_" + std::to_string(i) + ".bin");
    } else {
        files.push_back(dir + "/test_batch.bin");
    }
    constexpr std::int64_t kImage = 3 * 32 * 32;
    RawDataset d;
    d.channels = 3;
    d.height = d.width = 32;
    d.mean = 0.4734f;
    d.std = 0.2516f;
    for (const std::string &f : files) {
        if (!std::filesystem::exists(f))
            throw EngineError("CIFAR-10 file " + f + " is missing");
        QString error;
        const std::optional<QByteArray> bytes = files::readRegular(QString::fromStdString(f), kMaxCifarFileBytes, &error);
        if (!bytes)
            throw EngineError("CIFAR-10 file: " + error.toStdString());
        if (bytes->isEmpty() || bytes->size() % (kImage + 1) != 0)
            throw EngineError("CIFAR-10 file " + f + " is truncated or not in the binary format");
        for (qsizetype off = 0; off < bytes->size(); off += kImage + 1) {
            const auto label = std::uint8_t(bytes->at(off));
            if (label >= 10)
                throw EngineError("CIFAR-10 file " + f + " has a label out of range (corrupt file)");
            d.labels.push_back(label);
            d.pixels.insert(d.pixels.end(), bytes->begin() + off + 1, bytes->begin() + off + 1 + kImage);
        }
    }
    d.size = std::int64_t(d.labels.size());
    return d;
}

// Ten fixed random prototypes plus per-sample noise and shift: separable,
// but not trivially, so accuracy climbs over a few hundred steps.
RawDataset makeSynthetic(Split split)
{
    RawDataset d;
    d.size = split == Split::Train ? 12000 : 2000;
    d.mean = 0.5f;
    d.std = 0.25f;
    const std::int64_t px = d.sampleBytes();
    std::mt19937_64 protoRng(20210621);
    std::uniform_real_distribution<float> u(0.f, 1.f);
    std::vector<float> protos(std::size_t(d.classes * px));
    for (auto &p : protos)
        p = u(protoRng);
    std::mt19937_64 rng(split == Split::Train ? 1 : 2);
    std::normal_distribution<float> noise(0.f, 0.35f);
    d.pixels.resize(std::size_t(d.size * px));
    d.labels.resize(std::size_t(d.size));
    for (std::int64_t i = 0; i < d.size; ++i) {
        const int c = int(rng() % std::uint64_t(d.classes));
        d.labels[std::size_t(i)] = std::uint8_t(c);
        for (std::int64_t j = 0; j < px; ++j) {
            const float v = protos[std::size_t(c * px + j)] + noise(rng);
            d.pixels[std::size_t(i * px + j)] = std::uint8_t(std::clamp(v, 0.f, 1.f) * 255.f);
        }
    }
    return d;
}

// Whether offset (dx, dy) from a shape's centre, at radius r, lies inside
// class c's shape.
bool insideShape(int c, float dx, float dy, float r)
{
    const float ax = std::abs(dx), ay = std::abs(dy), d2 = dx * dx + dy * dy;
    switch (c) {
    case 0: return d2 <= r * r;                                               // disc
    case 1: return ax <= 0.8f * r && ay <= 0.8f * r;                          // square
    case 2: return dy <= 0.8f * r && ax <= 0.5f * (dy + 0.8f * r);            // triangle
    case 3: return (ax <= r / 4 && ay <= r) || (ay <= r / 4 && ax <= r);      // plus
    case 4: return d2 <= r * r && d2 >= 0.36f * r * r;                        // ring
    case 5: return ay <= r / 3 && ax <= r;                                    // bar
    case 6: return ax <= r / 3 && ay <= r;                                    // column
    case 7: return std::abs(dx - dy) <= r / 3 && ax <= r && ay <= r;          // diagonal
    case 8: return ax + ay <= r;                                              // diamond
    default: return std::max(ax, ay) <= 0.85f * r && std::max(ax, ay) >= 0.5f * r;  // frame
    }
}

// A CIFAR-10-sized stand-in no Debian package ships: 32x32 RGB, ten shape
// classes, each drawn at a random place and size in a random colour on a
// random, noisy gradient background with two distracting patches. Colour
// says nothing about the class, so a model must learn shapes wherever they
// are: a small CNN needs minutes of CPU, not seconds. Identical on every
// worker (fixed seeds); channel-planar like the CIFAR-10 binary files.
RawDataset makeShapes(Split split)
{
    RawDataset d;
    d.channels = 3;
    d.height = d.width = 32;
    d.size = split == Split::Train ? 30000 : 5000;
    d.mean = 0.5f;
    d.std = 0.29f;
    constexpr int kSide = 32, kPlane = kSide * kSide;
    std::mt19937_64 rng(split == Split::Train ? 3232 : 6464);
    std::uniform_real_distribution<float> u(0.f, 1.f);
    std::normal_distribution<float> noise(0.f, 0.08f);
    d.pixels.resize(std::size_t(d.size * 3 * kPlane));
    d.labels.resize(std::size_t(d.size));
    float img[3][kSide][kSide];
    for (std::int64_t i = 0; i < d.size; ++i) {
        const int c = int(rng() % 10);
        d.labels[std::size_t(i)] = std::uint8_t(c);
        float bg[3], fg[3], slope[3][2];
        for (int ch = 0; ch < 3; ++ch) {
            bg[ch] = u(rng);
            fg[ch] = u(rng);
            slope[ch][0] = (u(rng) - 0.5f) * 0.02f;
            slope[ch][1] = (u(rng) - 0.5f) * 0.02f;
        }
        // Keep the shape visible: push the colour away from the background.
        if (std::abs(fg[0] - bg[0]) + std::abs(fg[1] - bg[1]) + std::abs(fg[2] - bg[2]) < 0.6f) {
            for (int ch = 0; ch < 3; ++ch)
                fg[ch] = 1.f - bg[ch];
        }
        for (int ch = 0; ch < 3; ++ch) {
            for (int y = 0; y < kSide; ++y) {
                for (int x = 0; x < kSide; ++x)
                    img[ch][y][x] = bg[ch] + slope[ch][0] * float(x - 16) + slope[ch][1] * float(y - 16);
            }
        }
        for (int patch = 0; patch < 2; ++patch) {
            const int px = int(rng() % 28), py = int(rng() % 28), w = 2 + int(rng() % 3), h = 2 + int(rng() % 3);
            const float col[3] = {u(rng), u(rng), u(rng)};
            for (int ch = 0; ch < 3; ++ch) {
                for (int y = py; y < std::min(kSide, py + h); ++y) {
                    for (int x = px; x < std::min(kSide, px + w); ++x)
                        img[ch][y][x] = col[ch];
                }
            }
        }
        const float r = 5.f + 6.f * u(rng), cx = 9.f + 14.f * u(rng), cy = 9.f + 14.f * u(rng);
        for (int y = 0; y < kSide; ++y) {
            for (int x = 0; x < kSide; ++x) {
                if (insideShape(c, float(x) - cx, float(y) - cy, r)) {
                    for (int ch = 0; ch < 3; ++ch)
                        img[ch][y][x] = fg[ch];
                }
            }
        }
        std::uint8_t *out = d.pixels.data() + i * 3 * kPlane;
        for (int ch = 0; ch < 3; ++ch) {
            for (int y = 0; y < kSide; ++y) {
                for (int x = 0; x < kSide; ++x)
                    *out++ = std::uint8_t(std::clamp(img[ch][y][x] + noise(rng), 0.f, 1.f) * 255.f);
            }
        }
    }
    return d;
}

// The user formats keep each split under its own name in `dir`.
RawDataset loadUserFormat(const std::string &name, const std::string &dir, Split split,
                          const std::vector<std::string> &classNames)
{
    if (dir.empty())
        throw EngineError(name + " needs data_dir: the folder holding its train and test data");
    const std::string base = dir + (split == Split::Train ? "/train" : "/test");
    if (name == "csv")
        return readCsvTable(base + ".csv", classNames);
    if (name == "npy")
        return readNpyPair(base + "/x.npy", base + "/y.npy", classNames);
    return readImageFolder(base, classNames);
}

} // namespace

std::vector<std::int64_t> RawDataset::classHistogram() const
{
    std::vector<std::int64_t> counts(std::size_t(std::max(classes, 0)), 0);
    for (const std::uint8_t l : labels) {
        if (l < counts.size())
            ++counts[l];
    }
    return counts;
}

void RawDataset::copySamples(const std::vector<std::int64_t> &indices, void *out) const
{
    if (!pixelFile.empty()) {
        readIdxSamples(pixelFile, indices, static_cast<std::uint8_t *>(out));
        return;
    }
    const std::size_t bytes = std::size_t(sampleBytes()) * (floats ? sizeof(float) : 1);
    const char *src = floats ? reinterpret_cast<const char *>(values.data()) : reinterpret_cast<const char *>(pixels.data());
    for (std::size_t i = 0; i < indices.size(); ++i)
        std::memcpy(static_cast<char *>(out) + i * bytes, src + std::size_t(indices[i]) * bytes, bytes);
}

void assignLabels(RawDataset &d, const std::vector<std::int64_t> &labels, const std::vector<std::string> &classNames,
                  const std::string &file)
{
    const std::int64_t limit = classNames.empty() ? 256 : std::int64_t(classNames.size());
    std::int64_t top = 0;
    d.labels.reserve(labels.size());
    for (const std::int64_t l : labels) {
        if (l < 0 || l >= limit)
            throw EngineError(file + ": label " + std::to_string(l) + " is out of range; labels are class ids from 0 to "
                              + std::to_string(limit - 1)
                              + (classNames.empty() ? "" : " (one per entry of class_names)"));
        top = std::max(top, l);
        d.labels.push_back(std::uint8_t(l));
    }
    d.classes = classNames.empty() ? int(top + 1) : int(classNames.size());
}

void setPixelStats(RawDataset &d)
{
    double sum = 0, squares = 0;
    for (const std::uint8_t b : d.pixels) {
        sum += b;
        squares += double(b) * b;
    }
    const double n = std::max<double>(1, double(d.pixels.size()));
    const double mean = sum / n / 255.0;
    const double var = squares / n / (255.0 * 255.0) - mean * mean;
    d.mean = float(mean);
    d.std = float(std::max(std::sqrt(std::max(var, 0.0)), 1e-3));
}

RawDataset loadDataset(const std::string &name, const std::string &dir, Split split,
                       const std::vector<std::string> &classNames)
{
    if (name == "imagefolder" || name == "csv" || name == "npy")
        return loadUserFormat(name, dir, split, classNames);
    const std::string prefix = split == Split::Train ? "train" : "t10k";
    if (name == "fashion-mnist") {
        RawDataset d = loadIdxPair(dir.empty() ? kFashionMnistDir : dir, prefix, "Fashion-MNIST",
                                   dir.empty() ? "install it with: sudo apt-get install dataset-fashion-mnist"
                                               : "check data_dir or install dataset-fashion-mnist");
        d.mean = 0.2860f;
        d.std = 0.3530f;
        return d;
    }
    if (name == "mnist") {
        if (dir.empty())
            throw EngineError("mnist needs data_dir: the folder holding train-images-idx3-ubyte.gz and friends");
        RawDataset d = loadIdxPair(dir, prefix, "MNIST", "check data_dir");
        d.mean = 0.1307f;
        d.std = 0.3081f;
        return d;
    }
    if (name == "cifar10")
        return loadCifar10(dir, split);
    if (name == "synthetic")
        return makeSynthetic(split);
    if (name == "shapes")
        return makeShapes(split);
    throw EngineError("unknown dataset \"" + name
                      + "\" (use fashion-mnist, mnist, cifar10, synthetic, shapes, imagefolder, csv or npy)");
}

} // namespace dlion::engine
