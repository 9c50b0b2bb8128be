#pragma once

#include <chrono>
#include <vector>

namespace dlion::engine {

// Paces the bytes a worker sends on each outgoing link so that, on
// loopback, a link behaves like one of the emulated bandwidth: a transfer
// occupies its link for bytes / rate (plus latency) and queues behind the
// previous transfer on the same link (a token bucket without burst).
// Different links run in parallel, as separate network paths do.
class LinkPacer {
public:
    using Clock = std::chrono::steady_clock;

    explicit LinkPacer(int links) : m_busyUntil(std::size_t(links), Clock::time_point{}) {}

    // Books `seconds` of transfer on `link` starting no earlier than `now`;
    // returns when the transfer completes.
    Clock::time_point reserve(int link, double seconds, Clock::time_point now)
    {
        auto &busy = m_busyUntil[std::size_t(link)];
        const auto start = std::max(now, busy);
        busy = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
        return busy;
    }

private:
    std::vector<Clock::time_point> m_busyUntil;
};

} // namespace dlion::engine
