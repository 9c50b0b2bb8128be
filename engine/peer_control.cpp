#include "peer_control.h"

#include <algorithm>
#include <limits>

namespace dlion::engine {

namespace {
// Evaluations kept per rank: far more than a peer can be ahead by.
constexpr std::size_t kEvalsKept = 64;
} // namespace

ControlRows::ControlRows(int world, int rank)
    : m_world(world), m_rank(rank), m_rows(std::size_t(world), std::vector<double>(std::size_t(SlotCount + world), 0.0))
{}

void ControlRows::set(int rank, std::vector<double> row)
{
    row.resize(std::size_t(SlotCount + m_world), 0.0);
    m_rows[std::size_t(rank)] = std::move(row);
}

bool ControlRows::any(Slot s) const
{
    return std::any_of(m_rows.begin(), m_rows.end(), [s](const std::vector<double> &r) { return r[s] > 0; });
}

bool ControlRows::all(Slot s) const
{
    return std::all_of(m_rows.begin(), m_rows.end(), [s](const std::vector<double> &r) { return r[s] > 0; });
}

double ControlRows::sumWithOwn(Slot s, double own) const
{
    double total = own;
    for (int r = 0; r < m_world; ++r) {
        if (r != m_rank)
            total += at(r, s);
    }
    return total;
}

std::vector<double> ControlRows::bandwidth() const
{
    std::vector<double> out(std::size_t(m_world * m_world), 0.0);
    for (int j = 0; j < m_world; ++j) {
        for (int i = 0; i < m_world; ++i)
            out[std::size_t(i * m_world + j)] = m_rows[std::size_t(j)][std::size_t(SlotCount + i)];
    }
    return out;
}

void EvalCollector::add(int rank, std::int64_t index, double accuracy, double loss, double t)
{
    auto &q = m_byRank[std::size_t(rank)];
    q.push_back({index, accuracy, loss, t});
    if (q.size() > kEvalsKept)
        q.pop_front();
}

bool EvalCollector::next(protocol::EvalRecord &e)
{
    std::int64_t reached = std::numeric_limits<std::int64_t>::max();
    for (const auto &q : m_byRank)
        reached = std::min(reached, q.empty() ? -1 : q.back().index);
    if (reached <= m_reported)
        return false;
    m_reported = reached;
    double sumAcc = 0, sumLoss = 0;
    e.minAccuracy = 1;
    e.maxAccuracy = 0;
    e.t = 0;
    for (const auto &q : m_byRank) {
        const auto it = std::find_if(q.begin(), q.end(), [&](const Entry &x) { return x.index >= reached; });
        sumAcc += it->accuracy;
        sumLoss += it->loss;
        e.minAccuracy = std::min(e.minAccuracy, it->accuracy);
        e.maxAccuracy = std::max(e.maxAccuracy, it->accuracy);
        e.t = std::max(e.t, it->t);
    }
    e.globalAccuracy = sumAcc / double(m_byRank.size());
    e.globalLoss = sumLoss / double(m_byRank.size());
    return true;
}

} // namespace dlion::engine
