#include "residual_top_k.h"

namespace dlion::engine {

ResidualTopK::ResidualTopK(int links, std::int64_t length) : m_length(length)
{
    for (int i = 0; i < links; ++i)
        m_residual.push_back(torch::zeros({length}));
}

SparseGradient ResidualTopK::select(int link, const torch::Tensor &grad, std::int64_t k)
{
    torch::Tensor &acc = m_residual[std::size_t(link)];
    acc.add_(grad);
    SparseGradient out;
    out.length = m_length;
    // A sparse entry costs an index and a value: past half the length,
    // dense is smaller.
    if (k <= 0) {
        out.values = torch::empty({0}, acc.options());
        return out;
    }
    if (k * 2 >= m_length) {
        out.values = acc.clone();
        acc.zero_();
        return out;
    }
    out.indices = std::get<1>(acc.abs().topk(k, 0, true, false));
    out.values = acc.index_select(0, out.indices);
    acc.index_fill_(0, out.indices, 0.0);
    return out;
}

} // namespace dlion::engine
