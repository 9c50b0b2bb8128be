#include "residual_top_k.h"

#include "topk_select.h"

#ifdef DLION_HAVE_CUDA_TOPK
#include "topk_select_cuda.h"
#endif

#include "engine_log.h"

namespace dlion::engine {

#ifdef DLION_HAVE_CUDA_TOPK
namespace {
// Below this, copying the vector to a GPU and back costs more than the CPU
// selection (~2 ms per million entries) it saves.
constexpr std::int64_t kGpuMinLength = std::int64_t(1) << 20;

// Whether this process can select on a GPU, and why not; probed once, and
// only for a vector long enough to use it (the probe creates a CUDA context).
bool gpuUsable(std::string *why)
{
    static std::string reason;
    static const bool usable = topk::cuda::deviceAvailable(&reason);
    *why = usable ? "CUDA device present" : reason;
    return usable;
}
} // namespace
#endif

ResidualTopK::ResidualTopK(int links, std::int64_t length) : m_length(length)
{
    for (int i = 0; i < links; ++i)
        m_residual.push_back(torch::zeros({length}));
#ifdef DLION_HAVE_CUDA_TOPK
    std::string why = "fewer than " + std::to_string(kGpuMinLength) + " entries";
    m_gpu = length >= kGpuMinLength && gpuUsable(&why);
#else
    const std::string why = "built without the CUDA kernel";
#endif
    qCInfo(lcEngine).noquote() << "top-k selection over" << length << "entries runs on the"
                               << (m_gpu ? "GPU" : "CPU") << "(" + QString::fromStdString(why) + ")";
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
    out.indices = torch::empty({k}, torch::kLong);
    out.values = torch::empty({k}, acc.options());
    float *a = acc.data_ptr<float>();
    std::int64_t *indices = out.indices.data_ptr<std::int64_t>();
    float *values = out.values.data_ptr<float>();
    if (!selectOnGpu(a, k, indices, values))
        topk::select(a, m_length, k, indices, values);
    for (std::int64_t i = 0; i < k; ++i)
        a[indices[i]] = 0.f;
    return out;
}

bool ResidualTopK::selectOnGpu(const float *acc, std::int64_t k, std::int64_t *indices, float *values)
{
#ifdef DLION_HAVE_CUDA_TOPK
    if (!m_gpu)
        return false;
    std::string error;
    if (topk::cuda::selectHost(acc, m_length, k, indices, values, &error))
        return true;
    // Both paths give the same result, so falling back changes nothing but speed.
    qCWarning(lcEngine).noquote() << "GPU top-k failed, selecting on the CPU from now on:"
                                  << QString::fromStdString(error);
    m_gpu = false;
#endif
    return false;
}

} // namespace dlion::engine
