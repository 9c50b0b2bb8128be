// topk::select, the reference top-k the engine runs on the CPU, against a
// full sort, and the CUDA kernel against it where a build and device have one.
#include <topk_select.h>
#ifdef DLION_HAVE_CUDA_TOPK
#include <topk_select_cuda.h>
#endif

#include <QtTest>

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>
#include <vector>

using namespace dlion::engine;

namespace {

struct Selection {
    std::vector<std::int64_t> indices;
    std::vector<float> values;
};

Selection emptySelection(std::size_t n, std::int64_t k)
{
    const auto kept = std::size_t(std::clamp<std::int64_t>(k, 0, std::int64_t(n)));
    return {std::vector<std::int64_t>(kept, -1), std::vector<float>(kept, -7.f)};
}

Selection cpuSelect(const std::vector<float> &acc, std::int64_t k)
{
    Selection s = emptySelection(acc.size(), k);
    topk::select(acc.data(), std::int64_t(acc.size()), k, s.indices.data(), s.values.data());
    return s;
}

// The contract the slow way: rank by |v|'s bits (a stable sort keeps lower
// indices first among ties), keep k, report them by ascending index.
Selection bruteForce(const std::vector<float> &acc, std::int64_t k)
{
    Selection s = emptySelection(acc.size(), k);
    std::vector<std::int64_t> order(acc.size());
    std::iota(order.begin(), order.end(), 0);
    const auto magnitude = [&acc](std::int64_t i) { return std::bit_cast<std::uint32_t>(acc[std::size_t(i)]) & 0x7fffffffu; };
    std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) { return magnitude(a) > magnitude(b); });
    order.resize(s.indices.size());
    std::sort(order.begin(), order.end());
    for (std::size_t i = 0; i < order.size(); ++i) {
        s.indices[i] = order[i];
        s.values[i] = acc[std::size_t(order[i])];
    }
    return s;
}

// Indices equal and values equal bit for bit (so -0 differs from +0, NaN equals itself).
bool identical(const Selection &a, const Selection &b)
{
    return a.indices == b.indices && a.values.size() == b.values.size()
        && std::memcmp(a.values.data(), b.values.data(), a.values.size() * sizeof(float)) == 0;
}

// Seeded vectors of four kinds: Gaussian; few magnitudes with both signs and
// signed zeros (ties everywhere); mostly zeros; one magnitude throughout.
std::vector<float> randomVector(std::mt19937 &rng, std::size_t n, int kind)
{
    std::normal_distribution<float> normal;
    std::uniform_int_distribution<int> small(-3, 3);
    std::uniform_int_distribution<int> percent(0, 99);
    std::vector<float> v(n);
    for (auto &x : v) {
        switch (kind % 4) {
        case 0: x = normal(rng); break;
        case 1: x = small(rng) == 0 ? (percent(rng) < 50 ? 0.f : -0.f) : float(small(rng)) * 0.5f; break;
        case 2: x = percent(rng) < 95 ? 0.f : normal(rng); break;
        default: x = percent(rng) < 50 ? 1.5f : -1.5f; break;
        }
    }
    return v;
}

QByteArray describe(std::size_t n, std::int64_t k, int kind)
{
    return QByteArray("n=") + QByteArray::number(qulonglong(n)) + " k=" + QByteArray::number(qlonglong(k))
        + " kind=" + QByteArray::number(kind);
}

} // namespace

class TestTopKSelect : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void matchesFullSortOnSeededVectors();
    void edgeCasesOfK();
    void tiesGoToLowerIndicesWithSignsKept();
    void nanRanksAboveInfinity();
    void rejectsLengthPast32Bits();
    void gpuMatchesCpu();
};

void TestTopKSelect::matchesFullSortOnSeededVectors()
{
    std::mt19937 rng(11);
    for (int round = 0; round < 400; ++round) {
        const std::size_t n = std::uniform_int_distribution<std::size_t>(0, 3000)(rng);
        const std::int64_t k = std::uniform_int_distribution<std::int64_t>(-2, std::int64_t(n) + 2)(rng);
        const auto v = randomVector(rng, n, round);
        QVERIFY2(identical(cpuSelect(v, k), bruteForce(v, k)), describe(n, k, round % 4).constData());
    }
}

void TestTopKSelect::edgeCasesOfK()
{
    const std::vector<float> v{0.5f, -2.f, 0.f, 3.f};
    // k <= 0 selects nothing; k >= n selects everything, in index order.
    QVERIFY(cpuSelect(v, 0).indices.empty());
    QVERIFY(cpuSelect(v, -5).indices.empty());
    QVERIFY(cpuSelect({}, 3).indices.empty());
    for (std::int64_t k : {4, 9}) {
        const auto all = cpuSelect(v, k);
        QCOMPARE(all.indices, (std::vector<std::int64_t>{0, 1, 2, 3}));
        QCOMPARE(all.values, v);
    }
    const auto one = cpuSelect(v, 1);
    QCOMPARE(one.indices, std::vector<std::int64_t>{3});
    QCOMPARE(one.values, std::vector<float>{3.f});
}

void TestTopKSelect::tiesGoToLowerIndicesWithSignsKept()
{
    const auto s = cpuSelect({0.25f, -1.f, 1.f, -1.f, 1.f}, 3);
    QCOMPARE(s.indices, (std::vector<std::int64_t>{1, 2, 3}));
    QCOMPARE(s.values, (std::vector<float>{-1.f, 1.f, -1.f}));
    // -0 ties with +0 and is reported as -0.
    const auto z = cpuSelect({0.f, -0.f, 0.f}, 2);
    QCOMPARE(z.indices, (std::vector<std::int64_t>{0, 1}));
    QVERIFY(!std::signbit(z.values[0]) && std::signbit(z.values[1]));
}

void TestTopKSelect::nanRanksAboveInfinity()
{
    const float inf = std::numeric_limits<float>::infinity();
    const std::vector<float> v{1.f, -inf, std::numeric_limits<float>::quiet_NaN(), inf, 2.f};
    // NaN first, then the infinities (equal magnitude: lower index first).
    QCOMPARE(cpuSelect(v, 2).indices, (std::vector<std::int64_t>{1, 2}));
    QCOMPARE(cpuSelect(v, 3).indices, (std::vector<std::int64_t>{1, 2, 3}));
    QVERIFY(std::isnan(cpuSelect(v, 1).values[0]));
    QVERIFY(identical(cpuSelect(v, 3), bruteForce(v, 3)));
}

void TestTopKSelect::rejectsLengthPast32Bits()
{
    // The length is checked before anything is read.
    const float one = 1.f;
    std::int64_t index = 0;
    float value = 0.f;
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, topk::select(&one, std::int64_t(1) << 32, 1, &index, &value));
    QCOMPARE(index, 0);
}

void TestTopKSelect::gpuMatchesCpu()
{
#ifndef DLION_HAVE_CUDA_TOPK
    QSKIP("built without the CUDA kernel (no CUDA toolkit at configure time, or DLION_CUDA=OFF)");
#else
    std::string reason;
    if (!topk::cuda::deviceAvailable(&reason))
        QSKIP(qPrintable(QString::fromStdString("no CUDA device: " + reason)));
    std::mt19937 rng(23);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (int round = 0; round < 120; ++round) {
        // Mostly small vectors; every tenth past a million entries, the
        // engine's GPU threshold, so both sort passes see many blocks.
        const std::size_t n = round % 10 == 9 ? (std::size_t(1) << 20) + std::size_t(round)
                                              : std::uniform_int_distribution<std::size_t>(0, 5000)(rng);
        const std::int64_t k = std::uniform_int_distribution<std::int64_t>(-1, std::int64_t(n) + 1)(rng);
        auto v = randomVector(rng, n, round);
        if (round % 7 == 3 && n > 2) {
            v[n / 2] = nan;
            v[n - 1] = -std::numeric_limits<float>::infinity();
        }
        Selection gpu = emptySelection(n, k);
        std::string error;
        QVERIFY2(topk::cuda::selectHost(v.data(), std::int64_t(n), k, gpu.indices.data(), gpu.values.data(), &error),
                 error.c_str());
        QVERIFY2(identical(gpu, cpuSelect(v, k)), describe(n, k, round % 4).constData());
    }
#endif
}

QTEST_GUILESS_MAIN(TestTopKSelect)
#include "tst_topk_select.moc"
