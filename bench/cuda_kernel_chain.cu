// What a kernel boundary costs on the device: a chain of N dependent
// kernels (each waits for the one before, reads what it wrote, writes one
// value) replayed as a CUDA graph, with and without programmatic dependent
// launch, against a persistent grid that crosses the same N dependencies
// through a global-memory barrier (an atomic counter and fences) instead.
//
// Why: a decode step at batch 1 is a chain of ~10 kernels a layer, most of
// them latency-bound, so what a boundary costs bounds what fusing kernels
// (or one persistent kernel for a layer) can save. Prints µs per kernel or
// per barrier, for grids of 1 to 528 CTAs of 256 threads; "read by every
// CTA" makes every CTA load the value the kernel before wrote, as a GEMV
// loads its x.
//   build/cuda/cuda_kernel_chain          (on the GPU machine)
#include <cuda_runtime.h>

#include <cstdio>

#include "backend/cuda/cuda_check.h"

namespace {

constexpr int kChain = 256;    // kernels (or barriers) per timed run
constexpr int kReplays = 10;   // timed graph replays
constexpr int kThreads = 256;  // per CTA

// Link i of the chain: wait for link i - 1 (griddepcontrol.wait returns at
// once without PDL), read its value, let link i + 1 launch, write.
__global__ void link(int* values, int i, bool read_by_every_cta) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  int v = 0;
  if (read_by_every_cta || blockIdx.x == 0) v = *static_cast<volatile int*>(&values[i]);
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  if (blockIdx.x == 0 && threadIdx.x == 0) values[i + 1] = v + 1;
}

// The same chain in one grid: every CTA reads values[i], CTA 0 writes
// values[i + 1], then all CTAs meet at a barrier (arrivals counted on
// `arrived`, which starts at 0).
__global__ void persistent_chain(int* values, unsigned* arrived, int n) {
  for (int i = 0; i < n; ++i) {
    __syncthreads();
    const int v = *static_cast<volatile int*>(&values[i]);
    if (threadIdx.x == 0) {
      if (blockIdx.x == 0) values[i + 1] = v + 1;
      __threadfence();
      atomicAdd(arrived, 1u);
      const unsigned all = unsigned(i + 1) * gridDim.x;
      while (*static_cast<volatile unsigned*>(arrived) < all) {
      }
      __threadfence();
    }
    __syncthreads();
  }
}

float graph_us_per_kernel(cudaStream_t stream, int* values, int grid, bool pdl, bool read_by_every_cta) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < kChain; ++i) {
    cudaLaunchAttribute attribute{.id = cudaLaunchAttributeProgrammaticStreamSerialization};
    attribute.val.programmaticStreamSerializationAllowed = pdl ? 1 : 0;
    const cudaLaunchConfig_t config{.gridDim = dim3(unsigned(grid)),
                                    .blockDim = dim3(kThreads),
                                    .dynamicSmemBytes = 0,
                                    .stream = stream,
                                    .attrs = &attribute,
                                    .numAttrs = 1};
    CUDA_CHECK(cudaLaunchKernelEx(&config, link, values, i, read_by_every_cta));
  }
  CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int w = 0; w < 3; ++w) CUDA_CHECK(cudaGraphLaunch(exec, stream));
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  CUDA_CHECK(cudaEventRecord(start, stream));
  for (int r = 0; r < kReplays; ++r) CUDA_CHECK(cudaGraphLaunch(exec, stream));
  CUDA_CHECK(cudaEventRecord(stop, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  float ms = 0.0f;
  CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  return ms * 1000.0f / float(kReplays * kChain);
}

float persistent_us_per_barrier(cudaStream_t stream, int* values, unsigned* arrived, int grid) {
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  float ms = 0.0f;
  for (int run = 0; run < 4; ++run) {  // the last of 4 (the first ones warm up)
    CUDA_CHECK(cudaMemsetAsync(arrived, 0, sizeof(unsigned), stream));
    CUDA_CHECK(cudaEventRecord(start, stream));
    persistent_chain<<<grid, kThreads, 0, stream>>>(values, arrived, kChain);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaEventRecord(stop, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  }
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  return ms * 1000.0f / float(kChain);
}

void print_table() {
  int* values = nullptr;
  unsigned* arrived = nullptr;
  CUDA_CHECK(cudaMalloc(&values, (kChain + 1) * sizeof(int)));
  CUDA_CHECK(cudaMalloc(&arrived, sizeof(unsigned)));
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  std::printf(
      "| CTAs | graph, µs a kernel | graph + PDL | graph, read by every CTA | graph + PDL, read by every CTA "
      "| one grid, µs a barrier |\n");
  std::printf("|---|---|---|---|---|---|\n");
  for (const int grid : {1, 132, 264, 528}) {
    std::printf("| %d | %.3f | %.3f | %.3f | %.3f |", grid, graph_us_per_kernel(stream, values, grid, false, false),
                graph_us_per_kernel(stream, values, grid, true, false),
                graph_us_per_kernel(stream, values, grid, false, true),
                graph_us_per_kernel(stream, values, grid, true, true));
    // (A grid barrier needs every CTA resident: 2 per SM at most here.)
    if (grid <= 264)
      std::printf(" %.3f |\n", persistent_us_per_barrier(stream, values, arrived, grid));
    else
      std::printf(" – |\n");
  }
  CUDA_CHECK(cudaStreamDestroy(stream));
  CUDA_CHECK(cudaFree(arrived));
  CUDA_CHECK(cudaFree(values));
}

}  // namespace

int main() {
  int device_count = 0;
  if (cudaGetDeviceCount(&device_count) != cudaSuccess || device_count == 0) {
    std::printf("skipped: no CUDA device\n");
    return 0;
  }
  try {
    print_table();
  } catch (const brioche::Error& e) {
    std::fprintf(stderr, "cuda_kernel_chain: %s\n", e.what());
    return 1;
  }
  return 0;
}
