#pragma once

#include <algorithm>
#include <array>
#include <vector>

namespace dlion::engine {

// Per-link bandwidth estimate from measured transfers: an exponentially
// weighted average of bytes per second, so it follows changes within a few
// rounds, and at once when a link slows to under half: sizing the next
// payloads for the old speed would stall rounds.
//
// A rise goes by the median of the link's last three samples, and one
// taken sample raises the estimate at most kMaxRise-fold: over tc-shaped
// links a 16 KiB body read in 0.3 ms now and then (its header's receive
// completed late, with its body), and each such sample doubled a 0.2
// Mbit/s estimate; now one moves nothing, two in a row do. A link that got
// hundreds of times faster at once is rarer than that, and a real rise
// still shows within a few samples. Falls wait for no second sample: the
// sender's own bound on the link may lapse before one comes, and payloads
// would be sized for the old speed again.
// Transfers shorter than `minSeconds` carry too little signal (timer noise
// dominates) and are ignored.
class BandwidthEstimator {
public:
    explicit BandwidthEstimator(int links, double weight = 0.3, double minSeconds = 1e-4)
        : m_links(std::size_t(links)), m_weight(weight), m_minSeconds(minSeconds)
    {}

    void addTransfer(int link, double bytes, double seconds)
    {
        if (seconds < m_minSeconds || bytes <= 0)
            return;
        Link &l = m_links[std::size_t(link)];
        const double sample = bytes / seconds;
        double &e = l.bps;
        if (e <= 0 || sample < 0.5 * e) {
            // The samples before a fall describe a link that is gone.
            e = l.recent[0] = sample;
            l.count = 1;
            return;
        }
        l.recent[l.count++ % kWindow] = sample;
        // The median of the last three, or the lesser of two.
        std::array<double, kWindow> sorted = l.recent;
        const std::size_t n = std::min(l.count, kWindow);
        std::sort(sorted.begin(), sorted.begin() + std::ptrdiff_t(n));
        const double agreed = sorted[n == kWindow ? kWindow / 2 : 0];
        e = std::min(kMaxRise * e, (1 - m_weight) * e + m_weight * agreed);
    }
    static constexpr double kMaxRise = 2;
    // Bytes per second; 0 until the first usable transfer.
    double bytesPerSecond(int link) const { return m_links[std::size_t(link)].bps; }
    double mbps(int link) const { return bytesPerSecond(link) * 8e-6; }

private:
    static constexpr std::size_t kWindow = 3;
    struct Link {
        double bps = 0;
        std::array<double, kWindow> recent{};  // raw samples, a ring
        std::size_t count = 0;
    };
    std::vector<Link> m_links;
    double m_weight;
    double m_minSeconds;
};

} // namespace dlion::engine
