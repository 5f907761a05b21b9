// NCCL collectives across processes, one GPU per process (rank).
//
// Plain C++ (no NCCL or CUDA headers), so ops/ can include it; the
// implementation lives in nccl.cu and exists only when BRIOCHE_CUDA=ON.
// Every collective runs on cuda::stream(), so it orders with the kernels
// around it and can be recorded into a CUDA graph (NCCL supports stream
// capture). Failing NCCL calls throw brioche::Error with ncclGetErrorString.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace brioche::cuda {

// The 128 bytes that identify one NCCL clique: rank 0 creates it, every
// other rank must receive it (ops/rendezvous.h sends it over TCP).
using NcclUniqueId = std::array<uint8_t, 128>;
NcclUniqueId nccl_unique_id();

// Binds this process (thread) to GPU `device`; call before any other CUDA
// work (the stream and allocator belong to the device current at first use).
void set_device(int device);

// One rank's handle on the clique. Not copyable; destroys the communicator.
class Communicator {
 public:
  struct Options {
    int rank = 0;
    int size = 1;
    NcclUniqueId id{};
  };
  // Blocks until all `size` ranks have joined. Sets NCCL_NVLS_ENABLE=0
  // (NVLink multicast off) unless the environment already sets it.
  explicit Communicator(const Options& options);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }

  // data[i] = Σ over ranks of data[i], in place; `data` is a device pointer.
  void all_reduce_sum(float* data, size_t count);
  // Root's `bytes` bytes at device pointer `data` copied to every rank's `data`.
  void broadcast(void* data, size_t bytes, int root);

 private:
  void* comm_ = nullptr;  // ncclComm_t
  int rank_ = 0, size_ = 1;
};

}  // namespace brioche::cuda
