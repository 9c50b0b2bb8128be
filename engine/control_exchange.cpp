#include "control_exchange.h"

#include "comm.h"

namespace dlion::engine {

ControlExchange::ControlExchange(Comm &comm)
    : m_comm(comm), m_stride(SlotCount + comm.world()), m_buf(torch::zeros({comm.world() * m_stride}, torch::kDouble))
{}

void ControlExchange::exchange(const double (&mine)[SlotCount], const std::vector<double> &incoming)
{
    pack(mine, incoming, m_buf);
    m_comm.allreduceSum(m_buf);
}

void ControlExchange::pack(const double (&mine)[SlotCount], const std::vector<double> &incoming,
                           torch::Tensor block) const
{
    TORCH_CHECK(block.numel() == m_buf.numel(), "control block of ", block.numel(), " values, ", m_buf.numel(), " needed");
    std::vector<double> row(std::begin(mine), std::end(mine));
    row.insert(row.end(), incoming.begin(), incoming.end());
    block.zero_();
    block.narrow(0, std::int64_t(m_comm.rank()) * m_stride, std::int64_t(row.size()))
        .copy_(torch::from_blob(row.data(), {std::int64_t(row.size())}, torch::kDouble));
}

void ControlExchange::unpack(const torch::Tensor &block)
{
    m_buf.copy_(block);
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
