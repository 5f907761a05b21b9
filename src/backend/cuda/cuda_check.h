// Error checks for CUDA runtime and cuBLAS calls (include from .cu files only).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "backend/cuda/runtime.h"
#include "core/error.h"

namespace brioche::cuda::detail {

[[noreturn]] inline void fail_cuda(cudaError_t err, const char* call, const char* file, int line) {
  fail("CUDA error ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ") in ", call, " at ", file, ":", line);
}

[[noreturn]] inline void fail_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  fail("cuBLAS error ", int(status), " (", cublasLtGetStatusString(status), ") in ", call, " at ", file, ":", line);
}

}  // namespace brioche::cuda::detail

#define CUDA_CHECK(call)                                                   \
  do {                                                                     \
    cudaError_t err_ = (call);                                             \
    if (err_ != cudaSuccess) [[unlikely]]                                  \
      ::brioche::cuda::detail::fail_cuda(err_, #call, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: launch-configuration errors surface here.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

#define CUBLAS_CHECK(call)                                                  \
  do {                                                                      \
    cublasStatus_t st_ = (call);                                            \
    if (st_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                          \
      ::brioche::cuda::detail::fail_cublas(st_, #call, __FILE__, __LINE__); \
  } while (0)

namespace brioche::cuda::detail {
// The brioche stream as a cudaStream_t.
inline cudaStream_t current_stream() { return static_cast<cudaStream_t>(::brioche::cuda::stream()); }
}  // namespace brioche::cuda::detail
