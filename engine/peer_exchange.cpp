#include "peer_exchange.h"

#include "comm.h"
#include "engine_error.h"
#include "link_emulator.h"

#include <algorithm>
#include <limits>
#include <thread>

namespace dlion::engine {

namespace {
constexpr int kTagPayload = 1;
// Payloads below this say more about latency than bandwidth...
constexpr double kMinEstimateBytes = 16 * 1024;
// ...unless they took this long: then the link's rate dominates (a link cut
// to a trickle only ever carries small payloads).
constexpr double kMinEstimateS = 0.25;

using Clock = LinkPacer::Clock;
} // namespace

PeerExchange::PeerExchange(Comm &comm, const LinkEmulator &emulator)
    : m_comm(comm), m_emulator(emulator), m_pacer(comm.world()), m_incoming(comm.world()),
      m_lastBytes(std::size_t(comm.world()), 0)
{}

void PeerExchange::shareAndAverage(const SparseGradient &payload, torch::Tensor &grad, protocol::RoundRecord &record,
                                   const std::vector<double> &bandwidth, double t)
{
    const int n = m_comm.world(), me = m_comm.rank();
    const std::vector<SparseGradient> in = exchange(std::vector<SparseGradient>(std::size_t(n), payload), t);
    record.linkFraction.assign(std::size_t(n), double(payload.values.numel()) / double(grad.numel()));
    record.linkFraction[std::size_t(me)] = 0;
    report(record, bandwidth);
    for (int j = 0; j < n; ++j) {
        if (j != me)
            in[std::size_t(j)].addTo(grad, 1.0);
    }
    grad.div_(n);
}

std::vector<double> PeerExchange::incomingBandwidth() const
{
    std::vector<double> out(std::size_t(m_comm.world()), 0.0);
    for (int j = 0; j < m_comm.world(); ++j)
        out[std::size_t(j)] = m_incoming.bytesPerSecond(j);
    return out;
}

std::int64_t PeerExchange::entriesWithin(int peer, double seconds, double t) const
{
    const LinkEmulator::PacerScope pacer;
    const double mbps = m_emulator.capMbps(m_comm.rank(), peer, t);
    if (mbps <= 0)
        return std::numeric_limits<std::int64_t>::max();
    const double bytes = (seconds - m_emulator.latencyS()) * mbps * 1e6 / 8.0 - double(sparse_codec::kHeaderInts * 4);
    return std::max<std::int64_t>(0, std::int64_t(bytes / 8.0));
}

void PeerExchange::report(protocol::RoundRecord &record, const std::vector<double> &bandwidth) const
{
    const int n = m_comm.world(), me = m_comm.rank();
    record.linkMbps.assign(std::size_t(n), 0.0);
    record.linkBytes.assign(std::size_t(n), 0.0);
    for (int j = 0; j < n; ++j) {
        if (j == me)
            continue;
        if (!bandwidth.empty())
            record.linkMbps[std::size_t(j)] = bandwidth[std::size_t(me * n + j)] * 8e-6;
        record.linkBytes[std::size_t(j)] = double(m_lastBytes[std::size_t(j)]);
        record.bytesSent += m_lastBytes[std::size_t(j)];
    }
}

std::vector<SparseGradient> PeerExchange::exchange(const std::vector<SparseGradient> &out, double t, double deadlineS,
                                                   std::vector<SparseGradient> *undelivered)
{
    const int n = m_comm.world(), me = m_comm.rank();
    std::vector<torch::Tensor> wireOut(static_cast<std::size_t>(n)), wireIn(static_cast<std::size_t>(n));
    auto sizes = torch::zeros({n * n}, torch::kLong);
    if (undelivered) {
        SparseGradient none;
        none.values = torch::empty({0});
        undelivered->assign(std::size_t(n), none);
    }
    for (int j = 0; j < n; ++j) {
        if (j == me || out[std::size_t(j)].values.numel() == 0)
            continue;
        const SparseGradient *payload = &out[std::size_t(j)];
        SparseGradient cut;
        if (deadlineS > 0) {
            const LinkEmulator::PacerScope pacer;
            const std::int64_t fits = entriesWithin(j, deadlineS, t);
            if (m_emulator.transferSeconds(me, j, double(payload->wireBytes()), t) > deadlineS
                && payload->values.numel() > fits) {
                cut = payload->takeLargest(fits, undelivered ? &(*undelivered)[std::size_t(j)] : nullptr);
                payload = &cut;
                if (cut.values.numel() == 0)
                    continue;
            }
        }
        wireOut[std::size_t(j)] = sparse_codec::encode(*payload);
        sizes.data_ptr<std::int64_t>()[me * n + j] = wireOut[std::size_t(j)].numel();
    }
    // Agreeing on sizes is also a barrier: every worker starts sending now,
    // so arrival times measure the links.
    m_comm.allreduceSum(sizes);
    const auto start = Clock::now();

    // c10d Gloo requests complete only inside wait(), so each receive is
    // waited on by its own thread, which timestamps the arrival.
    std::vector<Comm::Request> recvs(static_cast<std::size_t>(n));
    std::vector<double> arrival(static_cast<std::size_t>(n), 0);
    std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
    std::vector<std::thread> waiters;
    for (int j = 0; j < n; ++j) {
        const std::int64_t size = sizes.data_ptr<std::int64_t>()[j * n + me];
        if (j == me || size == 0)
            continue;
        wireIn[std::size_t(j)] = torch::empty({size}, torch::kInt);
        recvs[std::size_t(j)] = m_comm.irecv(wireIn[std::size_t(j)], j, kTagPayload);
        waiters.emplace_back([&, j] {
            try {
                recvs[std::size_t(j)].wait();
                arrival[std::size_t(j)] = std::chrono::duration<double>(Clock::now() - start).count();
            } catch (...) {
                errors[std::size_t(j)] = std::current_exception();
            }
        });
    }

    // Each send leaves when its emulated link would have delivered it.
    std::vector<std::pair<Clock::time_point, int>> schedule;
    for (int j = 0; j < n; ++j) {
        const double bytes = j == me || !wireOut[std::size_t(j)].defined() ? 0 : double(wireOut[std::size_t(j)].numel()) * 4;
        m_lastBytes[std::size_t(j)] = std::int64_t(bytes);
        if (bytes == 0)
            continue;
        const LinkEmulator::PacerScope pacer;
        schedule.emplace_back(m_pacer.reserve(j, m_emulator.transferSeconds(me, j, bytes, t), start), j);
    }
    std::sort(schedule.begin(), schedule.end());
    std::vector<Comm::Request> sends(static_cast<std::size_t>(n));
    try {
        for (const auto &[when, j] : schedule) {
            std::this_thread::sleep_until(when);
            sends[std::size_t(j)] = m_comm.isend(wireOut[std::size_t(j)], j, kTagPayload);
        }
        for (const auto &[when, j] : schedule)
            sends[std::size_t(j)].wait();
    } catch (...) {
        for (auto &w : waiters)
            w.join();  // the receives fail too, within the group timeout
        throw;
    }
    for (auto &w : waiters)
        w.join();
    for (const auto &e : errors) {
        if (e)
            std::rethrow_exception(e);
    }

    std::vector<SparseGradient> in(static_cast<std::size_t>(n));
    for (int j = 0; j < n; ++j) {
        if (j == me)
            continue;
        if (!wireIn[std::size_t(j)].defined()) {
            in[std::size_t(j)].values = torch::empty({0});
            continue;
        }
        const double bytes = double(wireIn[std::size_t(j)].numel()) * 4, seconds = arrival[std::size_t(j)];
        // A small payload that arrived fast still proves the link at least
        // that fast (latency only slows it): one that beats the estimate
        // raises it, so a link that recovers from a cut is noticed.
        const double estimate = m_incoming.bytesPerSecond(j);
        if (bytes >= kMinEstimateBytes || seconds >= kMinEstimateS || (estimate > 0 && bytes > seconds * estimate))
            m_incoming.addTransfer(j, bytes, seconds);
        in[std::size_t(j)] = sparse_codec::decode(wireIn[std::size_t(j)]);
    }
    return in;
}

} // namespace dlion::engine
