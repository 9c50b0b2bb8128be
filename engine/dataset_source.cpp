#include "dataset_source.h"

#include "engine_error.h"
#include "idx_reader.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>

namespace dlion::engine {

namespace {

RawDataset loadIdxPair(const std::string &dir, const std::string &prefix, const std::string &what,
                       const std::string &howToGet)
{
    const std::string images = dir + "/" + prefix + "-images-idx3-ubyte.gz";
    const std::string labels = dir + "/" + prefix + "-labels-idx1-ubyte.gz";
    for (const std::string &p : {images, labels}) {
        if (!std::filesystem::exists(p))
            throw EngineError(what + " not found: " + p + " is missing; " + howToGet);
    }
    IdxArray img = readIdx(images);
    IdxArray lab = readIdx(labels);
    if (img.dims.size() != 3 || lab.dims.size() != 1 || img.dims[0] != lab.dims[0])
        throw EngineError(what + " files in " + dir + " do not match (images " + std::to_string(img.dims[0])
                          + " vs labels " + std::to_string(lab.dims[0]) + ")");
    RawDataset d;
    d.size = img.dims[0];
    d.height = int(img.dims[1]);
    d.width = int(img.dims[2]);
    d.pixels = std::move(img.data);
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
        std::ifstream in(f, std::ios::binary);
        if (!in)
            throw EngineError("CIFAR-10 file " + f + " is missing");
        const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        if (bytes.empty() || bytes.size() % (kImage + 1) != 0)
            throw EngineError("CIFAR-10 file " + f + " is truncated or not in the binary format");
        for (std::size_t off = 0; off < bytes.size(); off += kImage + 1) {
            const auto label = std::uint8_t(bytes[off]);
            if (label >= 10)
                throw EngineError("CIFAR-10 file " + f + " has a label out of range (corrupt file)");
            d.labels.push_back(label);
            d.pixels.insert(d.pixels.end(), bytes.begin() + std::ptrdiff_t(off) + 1,
                            bytes.begin() + std::ptrdiff_t(off + 1 + kImage));
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

} // namespace

RawDataset loadDataset(const std::string &name, const std::string &dir, Split split)
{
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
    throw EngineError("unknown dataset \"" + name + "\" (use fashion-mnist, mnist, cifar10 or synthetic)");
}

} // namespace dlion::engine
