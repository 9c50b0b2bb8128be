#pragma once

#include <algorithm>
#include <vector>

namespace dlion::engine {

// Per-link bandwidth estimate from measured transfers: an exponentially
// weighted average of bytes per second, so it follows changes within a few
// rounds, and at once when a link slows to under half. One sample raises it
// at most kMaxRise-fold: a sample hundreds of times the estimate is more
// likely mistimed (on a link jammed both ways Gloo may hand a header over
// with its body) than a link that got that much faster at once, and sizing
// the next payload for it held a 0.2 Mbit/s link for 10 s. A real rise
// still shows within a few samples. Transfers shorter than `minSeconds`
// carry too little signal (timer noise dominates) and are ignored.
class BandwidthEstimator {
public:
    explicit BandwidthEstimator(int links, double weight = 0.3, double minSeconds = 1e-4)
        : m_bps(std::size_t(links), 0), m_weight(weight), m_minSeconds(minSeconds)
    {}

    void addTransfer(int link, double bytes, double seconds)
    {
        if (seconds < m_minSeconds || bytes <= 0)
            return;
        double &e = m_bps[std::size_t(link)];
        const double sample = bytes / seconds;
        // A link that dropped below half its estimate is believed at once:
        // sizing the next payloads for the old speed would stall rounds.
        e = e > 0 && sample >= 0.5 * e ? std::min(kMaxRise * e, (1 - m_weight) * e + m_weight * sample) : sample;
    }
    static constexpr double kMaxRise = 2;
    // Bytes per second; 0 until the first usable transfer.
    double bytesPerSecond(int link) const { return m_bps[std::size_t(link)]; }
    double mbps(int link) const { return m_bps[std::size_t(link)] * 8e-6; }

private:
    std::vector<double> m_bps;
    double m_weight;
    double m_minSeconds;
};

} // namespace dlion::engine
