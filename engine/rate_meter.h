#pragma once

namespace dlion::engine {

// Exponentially weighted moving average of a rate (samples per second).
// Recent rounds dominate, so a change of speed shows within a few rounds.
class RateMeter {
public:
    explicit RateMeter(double weight = 0.3) : m_weight(weight) {}

    void add(double samples, double seconds)
    {
        if (seconds <= 0)
            return;
        const double r = samples / seconds;
        m_rate = m_rate > 0 ? (1 - m_weight) * m_rate + m_weight * r : r;
    }
    double rate() const { return m_rate; }

private:
    double m_weight;
    double m_rate = 0;
};

} // namespace dlion::engine
