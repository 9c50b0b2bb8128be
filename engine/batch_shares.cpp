#include "batch_shares.h"

#include <algorithm>
#include <numeric>

namespace dlion::engine {

std::vector<std::int64_t> computeShares(const std::vector<double> &rates, std::int64_t globalBatch,
                                        std::int64_t minShare, std::int64_t maxShare)
{
    const std::size_t n = rates.size();
    if (n == 0)
        return {};
    globalBatch = std::max<std::int64_t>(globalBatch, std::int64_t(n));  // at least one sample each
    double measured = 0;
    std::size_t count = 0;
    for (double r : rates) {
        if (r > 0) {
            measured += r;
            ++count;
        }
    }
    std::vector<double> w(n);
    for (std::size_t i = 0; i < n; ++i)
        w[i] = rates[i] > 0 ? rates[i] : (count ? measured / double(count) : 1.0);

    // Water-filling: workers over the cap are fixed at it first (that frees
    // samples for the others), then workers under the floor; the free ones
    // share the rest in proportion. Each pass fixes at least one worker.
    std::vector<double> share(n, 0);
    std::vector<bool> fixed(n, false);
    for (std::size_t pass = 0; pass <= n; ++pass) {
        double freeBatch = double(globalBatch), freeWeight = 0;
        for (std::size_t i = 0; i < n; ++i) {
            if (fixed[i])
                freeBatch -= share[i];
            else
                freeWeight += w[i];
        }
        for (std::size_t i = 0; i < n; ++i) {
            if (!fixed[i])
                share[i] = freeWeight > 0 ? std::max(0.0, freeBatch) * w[i] / freeWeight : 0;
        }
        bool over = false;
        for (std::size_t i = 0; i < n; ++i) {
            if (!fixed[i] && share[i] > double(maxShare)) {
                share[i] = double(maxShare);
                fixed[i] = over = true;
            }
        }
        if (over)
            continue;
        bool under = false;
        for (std::size_t i = 0; i < n; ++i) {
            if (!fixed[i] && share[i] < double(minShare)) {
                share[i] = double(minShare);
                fixed[i] = under = true;
            }
        }
        if (!under)
            break;
    }
    // Largest-remainder rounding so the integer shares sum to the batch.
    std::vector<std::int64_t> out(n);
    std::int64_t total = 0;
    for (std::size_t i = 0; i < n; ++i)
        total += (out[i] = std::max<std::int64_t>(1, std::int64_t(share[i])));
    std::vector<std::size_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
        return share[a] - double(out[a]) > share[b] - double(out[b]);
    });
    for (std::size_t k = 0; total < globalBatch; k = (k + 1) % n, ++total)
        ++out[order[k]];
    // Minimum-one rounding may overshoot; take back from the largest shares.
    while (total > globalBatch) {
        auto it = std::max_element(out.begin(), out.end());
        --*it;
        --total;
    }
    return out;
}

std::int64_t batchGrowthFor(double waitS, double computeS, std::int64_t maxGrowth)
{
    std::int64_t g = 1;
    while (computeS > 0 && g * 2 <= maxGrowth && double(g * 2) * computeS <= waitS)
        g *= 2;
    return g;
}

} // namespace dlion::engine
