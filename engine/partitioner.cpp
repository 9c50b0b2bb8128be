#include "partitioner.h"

#include "engine_error.h"

#include <algorithm>
#include <numeric>
#include <random>

namespace dlion::engine {

namespace {

std::vector<std::vector<std::int64_t>> iidSplit(std::int64_t n, int workers, std::mt19937_64 &rng)
{
    std::vector<std::int64_t> all(static_cast<std::size_t>(n));
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    std::vector<std::vector<std::int64_t>> parts(static_cast<std::size_t>(workers));
    for (std::int64_t i = 0; i < n; ++i)
        parts[std::size_t(i % workers)].push_back(all[std::size_t(i)]);
    return parts;
}

std::vector<std::vector<std::int64_t>> dirichletSplit(const std::vector<std::uint8_t> &labels, int classes,
                                                      int workers, double alpha, std::mt19937_64 &rng)
{
    std::vector<std::vector<std::int64_t>> byClass(static_cast<std::size_t>(classes));
    for (std::size_t i = 0; i < labels.size(); ++i)
        byClass[labels[i]].push_back(std::int64_t(i));
    std::gamma_distribution<double> gamma(alpha, 1.0);
    std::vector<std::vector<std::int64_t>> parts(static_cast<std::size_t>(workers));
    for (auto &idx : byClass) {
        std::shuffle(idx.begin(), idx.end(), rng);
        std::vector<double> p(static_cast<std::size_t>(workers));
        double sum = 0;
        for (auto &x : p)
            sum += (x = gamma(rng) + 1e-12);
        std::size_t begin = 0;
        double cum = 0;
        for (int w = 0; w < workers; ++w) {
            cum += p[std::size_t(w)] / sum;
            const std::size_t end = w + 1 == workers ? idx.size() : std::size_t(cum * double(idx.size()));
            parts[std::size_t(w)].insert(parts[std::size_t(w)].end(), idx.begin() + std::ptrdiff_t(begin),
                                         idx.begin() + std::ptrdiff_t(std::max(begin, end)));
            begin = std::max(begin, end);
        }
    }
    for (auto &part : parts)
        std::shuffle(part.begin(), part.end(), rng);
    return parts;
}

} // namespace

std::vector<std::vector<std::int64_t>> partitionIndices(const std::vector<std::uint8_t> &labels, int classes,
                                                        int workers, double alpha, std::uint64_t seed,
                                                        std::int64_t minPerWorker)
{
    if (workers < 1)
        throw EngineError("cannot partition data over " + std::to_string(workers) + " workers");
    const auto n = std::int64_t(labels.size());
    if (n < std::int64_t(workers) * minPerWorker)
        throw EngineError("dataset of " + std::to_string(n) + " samples is too small for " + std::to_string(workers)
                          + " workers");
    std::mt19937_64 rng(seed);
    if (alpha <= 0)
        return iidSplit(n, workers, rng);
    constexpr int kAttempts = 100;
    for (int attempt = 0; attempt < kAttempts; ++attempt) {
        auto parts = dirichletSplit(labels, classes, workers, alpha, rng);
        if (std::all_of(parts.begin(), parts.end(), [&](const auto &p) { return std::int64_t(p.size()) >= minPerWorker; }))
            return parts;
    }
    throw EngineError("Dirichlet partition with alpha " + std::to_string(alpha) + " left a worker with fewer than "
                      + std::to_string(minPerWorker) + " samples; use a larger alpha");
}

} // namespace dlion::engine
