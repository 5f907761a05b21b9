// The kernel trace's buffer and its CSV (kernel_trace.h).
#include "backend/cuda/kernel_trace.h"

#include "core/env_switch.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"

namespace brioche::cuda::detail {

namespace {

KernelTraceBuffer* g_buffer = nullptr;
std::string g_path;

// At exit: the records, in the order their waits returned. (Errors are
// reported, not thrown: nothing can catch them here.)
void write_trace() {
  if (cudaDeviceSynchronize() != cudaSuccess) return (void)std::fprintf(stderr, "kernel trace: device error\n");
  std::vector<KernelTraceRecord> slots(kKernelTraceSlots);
  if (cudaMemcpy(slots.data(), g_buffer, sizeof(KernelTraceBuffer), cudaMemcpyDeviceToHost) != cudaSuccess) return;
  std::vector<KernelTraceRecord> records;
  for (const KernelTraceRecord& r : slots)
    if (r.released_ns != 0) records.push_back(r);
  std::sort(records.begin(), records.end(),
            [](const KernelTraceRecord& a, const KernelTraceRecord& b) { return a.released_ns < b.released_ns; });
  FILE* f = std::fopen(g_path.c_str(), "w");
  if (f == nullptr) return (void)std::fprintf(stderr, "kernel trace: cannot write %s\n", g_path.c_str());
  std::fprintf(f, "resident_ns,released_ns,grid,block\n");
  for (const KernelTraceRecord& r : records)
    std::fprintf(f, "%llu,%llu,%u,%u\n", static_cast<unsigned long long>(r.resident_ns),
                 static_cast<unsigned long long>(r.released_ns), r.grid, r.block);
  std::fclose(f);
  std::fprintf(stderr, "kernel trace: %zu kernels in %s\n", records.size(), g_path.c_str());
}

// (Function-local: units list their copies during static initialization,
// in an order across units that C++ leaves open.)
std::vector<const void*>& listed_symbols() {
  static std::vector<const void*> symbols;
  return symbols;
}

}  // namespace

KernelTraceBuffer* kernel_trace_buffer() {
  static KernelTraceBuffer* const buffer = []() -> KernelTraceBuffer* {
    std::string path = env_text("BRIOCHE_CUDA_TRACE");
    if (path.empty()) return nullptr;
    g_path = path;
    void* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, sizeof(KernelTraceBuffer)));
    CUDA_CHECK(cudaMemset(p, 0, sizeof(KernelTraceBuffer)));
    g_buffer = static_cast<KernelTraceBuffer*>(p);
    std::atexit(write_trace);
    return g_buffer;
  }();
  return buffer;
}

void list_kernel_trace_symbol(const void* symbol) { listed_symbols().push_back(symbol); }

void install_kernel_trace() {
  static const bool installed = [] {
    KernelTraceBuffer* buffer = kernel_trace_buffer();
    if (buffer != nullptr)
      for (const void* symbol : listed_symbols()) CUDA_CHECK(cudaMemcpyToSymbol(symbol, &buffer, sizeof buffer));
    return true;
  }();
  (void)installed;
}

}  // namespace brioche::cuda::detail
