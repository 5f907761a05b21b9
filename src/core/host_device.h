// BRIOCHE_HOST_DEVICE marks an inline function that CPU code and CUDA
// kernels share: __host__ __device__ under nvcc, nothing in plain C++.
#pragma once

#if defined(__CUDACC__)
#define BRIOCHE_HOST_DEVICE __host__ __device__
#else
#define BRIOCHE_HOST_DEVICE
#endif
