// Collectives across the ranks of a tensor-parallel job (one process per
// GPU). The model calls them through this interface; NCCL implements it on
// CUDA (backend/cuda/nccl.h). Tests implement it by hand on the CPU to check
// the sharded math without any communication library.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "core/tensor.h"

namespace brioche::ops {

class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // t = Σ over ranks of t, in place. f32 with contiguous rows, on the
  // collective's device; queued on its stream (may be recorded into a graph).
  virtual void all_reduce_sum(Tensor& t) = 0;
  // Rank `root`'s words copied into every rank's `words` (host memory, the
  // same length on every rank). Returns when `words` holds the result.
  virtual void broadcast(std::span<int32_t> words, int root) = 0;
};

struct CollectiveOptions {
  int rank = 0;
  int size = 1;
  std::string master;  // "HOST:PORT" of rank 0's rendezvous (ops/rendezvous.h)
  int timeout_s = 120;
};

// Joins the job: TCP rendezvous for NCCL's unique id, then an NCCL
// communicator on the current GPU (call cuda::set_device(rank) first, or
// select_device below). In a build without CUDA: an error saying so.
std::unique_ptr<Collective> connect_nccl(const CollectiveOptions& options);

// Makes GPU `device` this process's device (before any other CUDA work).
void select_device(int device);
// GPUs this process can see (0 without CUDA).
int device_count();

}  // namespace brioche::ops
