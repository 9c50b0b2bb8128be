#include "control_exchange.h"

#include "comm.h"

#include <algorithm>

namespace dlion::engine {

ControlExchange::ControlExchange(Comm &comm)
    : m_comm(comm), m_stride(SlotCount + comm.world()), m_buf(torch::zeros({comm.world() * m_stride}, torch::kDouble))
{}

void ControlExchange::exchange(const double (&mine)[SlotCount], const std::vector<double> &incoming)
{
    m_buf.zero_();
    auto *p = m_buf.data_ptr<double>() + m_comm.rank() * m_stride;
    std::copy(std::begin(mine), std::end(mine), p);
    std::copy(incoming.begin(), incoming.end(), p + SlotCount);
    m_comm.allreduceSum(m_buf);
}

double ControlExchange::at(int worker, Slot s) const { return m_buf.data_ptr<double>()[worker * m_stride + s]; }

std::vector<double> ControlExchange::bandwidth() const
{
    const int n = m_comm.world();
    std::vector<double> out(std::size_t(n * n), 0.0);
    for (int j = 0; j < n; ++j) {
        for (int i = 0; i < n; ++i)
            out[std::size_t(i * n + j)] = m_buf.data_ptr<double>()[j * m_stride + SlotCount + i];
    }
    return out;
}

bool ControlExchange::any(Slot s) const
{
    for (int w = 0; w < m_comm.world(); ++w) {
        if (at(w, s) > 0)
            return true;
    }
    return false;
}

double ControlExchange::sum(Slot s) const
{
    double total = 0;
    for (int w = 0; w < m_comm.world(); ++w)
        total += at(w, s);
    return total;
}

} // namespace dlion::engine
