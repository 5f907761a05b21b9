// NCCL communicator (see nccl.h).
#include <nccl.h>

#include <cstdlib>
#include <cstring>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/nccl.h"

#define NCCL_CHECK(call)                                                                                           \
  do {                                                                                                             \
    ncclResult_t r_ = (call);                                                                                      \
    if (r_ != ncclSuccess) [[unlikely]]                                                                            \
      ::brioche::fail("NCCL error ", int(r_), " (", ncclGetErrorString(r_), ") in ", #call, " at ", __FILE__, ":", \
                      __LINE__);                                                                                   \
  } while (0)

namespace brioche::cuda {

NcclUniqueId nccl_unique_id() {
  static_assert(sizeof(ncclUniqueId) == sizeof(NcclUniqueId), "ncclUniqueId is not 128 bytes");
  ncclUniqueId id;
  NCCL_CHECK(ncclGetUniqueId(&id));
  NcclUniqueId out;
  std::memcpy(out.data(), &id, out.size());
  return out;
}

void set_device(int device) {
  int n = device_count();
  BRIOCHE_CHECK(device >= 0 && device < n, "cuda: device ", device, " requested but the driver sees ", n, " GPU(s)");
  CUDA_CHECK(cudaSetDevice(device));
}

Communicator::Communicator(const Options& o) : rank_(o.rank), size_(o.size) {
  BRIOCHE_CHECK(o.size >= 1 && o.rank >= 0 && o.rank < o.size, "nccl: rank ", o.rank, " of ", o.size,
                " (expected 0 <= rank < size)");
  // NVLink multicast (NVLS) can take a shared host's GPUs out of service.
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  ncclUniqueId id;
  std::memcpy(&id, o.id.data(), sizeof(id));
  ncclComm_t comm = nullptr;
  NCCL_CHECK(ncclCommInitRank(&comm, o.size, id, o.rank));
  comm_ = comm;
}

Communicator::~Communicator() {
  if (comm_ != nullptr) {
    // Finish queued collectives first: destroying a communicator with work in
    // flight is undefined.
    cudaStreamSynchronize(detail::current_stream());
    ncclCommDestroy(static_cast<ncclComm_t>(comm_));
  }
}

void Communicator::all_reduce_sum(float* data, size_t count) {
  NCCL_CHECK(
      ncclAllReduce(data, data, count, ncclFloat32, ncclSum, static_cast<ncclComm_t>(comm_), detail::current_stream()));
}

void Communicator::broadcast(void* data, size_t bytes, int root) {
  BRIOCHE_CHECK(root >= 0 && root < size_, "nccl: broadcast root ", root, " outside ", size_, " ranks");
  NCCL_CHECK(
      ncclBroadcast(data, data, bytes, ncclUint8, root, static_cast<ncclComm_t>(comm_), detail::current_stream()));
}

}  // namespace brioche::cuda
