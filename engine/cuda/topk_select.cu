#include "topk_select_cuda.h"

#include <cub/device/device_radix_sort.cuh>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>

namespace dlion::engine::topk::cuda {

namespace {

constexpr unsigned kThreads = 256;

unsigned blocksFor(std::int64_t n)
{
    return unsigned(std::clamp<std::int64_t>((n + kThreads - 1) / kThreads, 1, 1 << 16));
}

// topk::select's rank key: |v|'s bits high, ~index low, so a descending sort
// puts larger magnitudes first and, among equal ones, lower indices first.
__global__ void rankKeys(const float *acc, std::uint32_t n, unsigned long long *keys)
{
    for (std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        keys[i] = (static_cast<unsigned long long>(__float_as_uint(acc[i]) & 0x7fffffffu) << 32) | ~i;
}

__global__ void keyIndices(const unsigned long long *keys, std::uint32_t k, std::uint32_t *indices)
{
    for (std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < k; i += gridDim.x * blockDim.x)
        indices[i] = ~static_cast<std::uint32_t>(keys[i]);
}

__global__ void gather(const float *acc, const std::uint32_t *sorted, std::uint32_t k, std::int64_t *indices,
                       float *values)
{
    for (std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < k; i += gridDim.x * blockDim.x) {
        indices[i] = sorted[i];
        values[i] = acc[sorted[i]];
    }
}

__global__ void probe() {}

// Device memory, released on scope exit.
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    DeviceBuffer(const DeviceBuffer &) = delete;
    DeviceBuffer &operator=(const DeviceBuffer &) = delete;
    ~DeviceBuffer()
    {
        if (m_data)
            cudaFree(m_data);
    }
    cudaError_t allocate(std::size_t bytes) { return cudaMalloc(&m_data, std::max<std::size_t>(bytes, 1)); }
    template <class T> T *as() const { return static_cast<T *>(m_data); }

private:
    void *m_data = nullptr;
};

bool failed(cudaError_t e, std::string *error)
{
    if (e == cudaSuccess)
        return false;
    if (error)
        *error = cudaGetErrorString(e);
    return true;
}

// cub counts items in int: lengths past INT_MAX stay on the CPU path.
bool lengthFits(std::int64_t n, std::string *error)
{
    if (n >= 0 && n <= INT_MAX)
        return true;
    if (error)
        *error = "length out of range for the CUDA top-k";
    return false;
}

} // namespace

bool deviceAvailable(std::string *reason)
{
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    // What the runtime reports where no driver is installed at all.
    if (e == cudaErrorInsufficientDriver) {
        if (reason)
            *reason = "no NVIDIA driver, or one older than CUDA runtime " + std::to_string(CUDART_VERSION / 1000) + "."
                + std::to_string(CUDART_VERSION % 1000 / 10);
        return false;
    }
    if (failed(e, reason))
        return false;
    if (count == 0) {
        if (reason)
            *reason = "no CUDA device";
        return false;
    }
    // A device whose architecture this build has no code for fails here.
    probe<<<1, 1>>>();
    if (failed(cudaGetLastError(), reason) || failed(cudaDeviceSynchronize(), reason)) {
        if (reason)
            *reason += " (kernels built for " DLION_CUDA_ARCHS ")";
        return false;
    }
    return true;
}

bool selectDevice(const float *acc, std::int64_t n, std::int64_t k, std::int64_t *indices, float *values,
                  void *stream, std::string *error)
{
    if (!lengthFits(n, error))
        return false;
    k = std::clamp<std::int64_t>(k, 0, n);
    if (k == 0)
        return true;
    const auto s = static_cast<cudaStream_t>(stream);
    const int count = int(n), kept = int(k);
    DeviceBuffer keys, sortedKeys, picked, sortedPicked, temp;
    std::size_t keyTempBytes = 0, indexTempBytes = 0;
    // Sort all keys by rank, keep the first k, then put their indices in ascending order.
    if (failed(cub::DeviceRadixSort::SortKeysDescending(nullptr, keyTempBytes, keys.as<unsigned long long>(),
                                                         sortedKeys.as<unsigned long long>(), count, 0, 64, s),
               error)
        || failed(cub::DeviceRadixSort::SortKeys(nullptr, indexTempBytes, picked.as<std::uint32_t>(),
                                                 sortedPicked.as<std::uint32_t>(), kept, 0, 32, s),
                  error)
        || failed(keys.allocate(std::size_t(n) * sizeof(unsigned long long)), error)
        || failed(sortedKeys.allocate(std::size_t(n) * sizeof(unsigned long long)), error)
        || failed(picked.allocate(std::size_t(k) * sizeof(std::uint32_t)), error)
        || failed(sortedPicked.allocate(std::size_t(k) * sizeof(std::uint32_t)), error)
        || failed(temp.allocate(std::max(keyTempBytes, indexTempBytes)), error))
        return false;
    rankKeys<<<blocksFor(n), kThreads, 0, s>>>(acc, std::uint32_t(n), keys.as<unsigned long long>());
    if (failed(cudaGetLastError(), error)
        || failed(cub::DeviceRadixSort::SortKeysDescending(temp.as<void>(), keyTempBytes, keys.as<unsigned long long>(),
                                                            sortedKeys.as<unsigned long long>(), count, 0, 64, s),
                  error))
        return false;
    keyIndices<<<blocksFor(k), kThreads, 0, s>>>(sortedKeys.as<unsigned long long>(), std::uint32_t(k),
                                                  picked.as<std::uint32_t>());
    if (failed(cudaGetLastError(), error)
        || failed(cub::DeviceRadixSort::SortKeys(temp.as<void>(), indexTempBytes, picked.as<std::uint32_t>(),
                                                 sortedPicked.as<std::uint32_t>(), kept, 0, 32, s),
                  error))
        return false;
    gather<<<blocksFor(k), kThreads, 0, s>>>(acc, sortedPicked.as<std::uint32_t>(), std::uint32_t(k), indices, values);
    return !failed(cudaGetLastError(), error) && !failed(cudaStreamSynchronize(s), error);
}

bool selectHost(const float *acc, std::int64_t n, std::int64_t k, std::int64_t *indices, float *values,
                std::string *error)
{
    if (!lengthFits(n, error))
        return false;
    k = std::clamp<std::int64_t>(k, 0, n);
    if (k == 0)
        return true;
    DeviceBuffer deviceAcc, deviceIndices, deviceValues;
    return !failed(deviceAcc.allocate(std::size_t(n) * sizeof(float)), error)
        && !failed(deviceIndices.allocate(std::size_t(k) * sizeof(std::int64_t)), error)
        && !failed(deviceValues.allocate(std::size_t(k) * sizeof(float)), error)
        && !failed(cudaMemcpy(deviceAcc.as<void>(), acc, std::size_t(n) * sizeof(float), cudaMemcpyHostToDevice), error)
        && selectDevice(deviceAcc.as<float>(), n, k, deviceIndices.as<std::int64_t>(), deviceValues.as<float>(), nullptr,
                        error)
        && !failed(cudaMemcpy(indices, deviceIndices.as<void>(), std::size_t(k) * sizeof(std::int64_t),
                              cudaMemcpyDeviceToHost),
                   error)
        && !failed(cudaMemcpy(values, deviceValues.as<void>(), std::size_t(k) * sizeof(float), cudaMemcpyDeviceToHost),
                   error);
}

} // namespace dlion::engine::topk::cuda
