#include "control_exchange.h"

#include "comm.h"

#include <algorithm>

namespace dlion::engine {

ControlExchange::ControlExchange(int rank, int world)
    : m_rank(rank), m_world(world), m_stride(SlotCount + world), m_mine(std::size_t(m_stride), 0.0),
      m_rows(std::size_t(world * m_stride), 0.0)
{}

void ControlExchange::setMine(const double (&slots)[SlotCount], const std::vector<double> &incoming)
{
    std::fill(m_mine.begin(), m_mine.end(), 0.0);
    std::copy(std::begin(slots), std::end(slots), m_mine.begin());
    std::copy_n(incoming.begin(), std::min<std::size_t>(incoming.size(), std::size_t(m_world)), m_mine.begin() + SlotCount);
}

void ControlExchange::accept(const double *rows)
{
    std::copy(rows, rows + m_rows.size(), m_rows.begin());
    m_fresh = true;
}

void ControlExchange::exchange(Comm &comm)
{
    auto buf = torch::zeros({std::int64_t(m_rows.size())}, torch::kDouble);
    std::copy(m_mine.begin(), m_mine.end(), buf.data_ptr<double>() + m_rank * m_stride);
    comm.allreduceSum(buf);
    accept(buf.data_ptr<double>());
}

bool ControlExchange::any(Slot s) const
{
    for (int w = 0; w < m_world; ++w) {
        if (at(w, s) > 0)
            return true;
    }
    return false;
}

double ControlExchange::sum(Slot s) const
{
    double total = 0;
    for (int w = 0; w < m_world; ++w)
        total += at(w, s);
    return total;
}

std::vector<double> ControlExchange::bandwidth() const
{
    std::vector<double> out(std::size_t(m_world * m_world), 0.0);
    for (int j = 0; j < m_world; ++j) {
        for (int i = 0; i < m_world; ++i)
            out[std::size_t(i * m_world + j)] = m_rows[std::size_t(j * m_stride + SlotCount + i)];
    }
    return out;
}

} // namespace dlion::engine
