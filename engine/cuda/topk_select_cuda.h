#pragma once

#include <cstdint>
#include <string>

// The CUDA twin of topk::select (engine/topk_select.h): same ranking, same
// output order, bit-identical indices and values. Torch-free, so nvcc never
// sees torch headers; linked only where the build found a CUDA toolkit
// (DLION_HAVE_CUDA_TOPK).
namespace dlion::engine::topk::cuda {

// True where a CUDA device can run this build's kernels; otherwise false
// with why (no driver, no device, no kernel image for its architecture).
bool deviceAvailable(std::string *reason);

// On device memory: acc holds n floats, indices and values room for k
// entries (k clamped to [0, n]; n up to 2^31 - 1). stream is a cudaStream_t,
// nullptr for the default stream; returns once the result is written.
// False with the CUDA error in *error on failure.
bool selectDevice(const float *acc, std::int64_t n, std::int64_t k, std::int64_t *indices, float *values,
                  void *stream, std::string *error);

// The same on host memory: copies acc to the device, selects, copies back.
bool selectHost(const float *acc, std::int64_t n, std::int64_t k, std::int64_t *indices, float *values,
                std::string *error);

} // namespace dlion::engine::topk::cuda
