#include "ops/collective.h"

#include "core/error.h"
#include "ops/rendezvous.h"
#if BRIOCHE_CUDA
#include "backend/cuda/nccl.h"
#include "backend/cuda/runtime.h"
#endif

namespace brioche::ops {

#if BRIOCHE_CUDA
namespace {

class NcclCollective final : public Collective {
 public:
  explicit NcclCollective(const cuda::Communicator::Options& o) : comm_(o) {}

  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }

  void all_reduce_sum(Tensor& t) override {
    BRIOCHE_CHECK(t.device() == Device::CUDA && t.dtype() == DType::F32 && t.is_contiguous(),
                  "all_reduce_sum: expected a contiguous f32 CUDA tensor, got ", t.describe());
    comm_.all_reduce_sum(static_cast<float*>(t.data()), size_t(t.numel()));
  }

  void broadcast(std::span<int32_t> words, int root) override {
    const size_t bytes = words.size_bytes();
    if (bytes == 0) return;
    if (bytes > staging_bytes_) {
      staging_ = cuda::allocate(bytes);
      staging_bytes_ = bytes;
    }
    if (rank() == root) cuda::copy_to_device(staging_.get(), words.data(), bytes);
    comm_.broadcast(staging_.get(), bytes, root);
    if (rank() != root) cuda::copy_to_host(words.data(), staging_.get(), bytes);
  }

 private:
  cuda::Communicator comm_;
  std::shared_ptr<void> staging_;  // device copy of the words being broadcast
  size_t staging_bytes_ = 0;
};

}  // namespace

std::unique_ptr<Collective> connect_nccl(const CollectiveOptions& o) {
  RendezvousOptions r{.rank = o.rank, .size = o.size, .master = o.master, .timeout_s = o.timeout_s};
  if (o.rank == 0) {
    const cuda::NcclUniqueId id = cuda::nccl_unique_id();
    r.payload.assign(id.begin(), id.end());
  }
  const std::vector<uint8_t> got = rendezvous(r);
  cuda::Communicator::Options c{.rank = o.rank, .size = o.size};
  BRIOCHE_CHECK(got.size() == c.id.size(), "connect_nccl: rank ", o.rank, " received ", got.size(), " bytes from ",
                o.master, " (expected a ", c.id.size(), "-byte NCCL unique id)");
  std::copy(got.begin(), got.end(), c.id.begin());
  return std::make_unique<NcclCollective>(c);
}

void select_device(int device) { cuda::set_device(device); }

int device_count() { return cuda::device_count(); }

#else

std::unique_ptr<Collective> connect_nccl(const CollectiveOptions& o) {
  fail("tensor parallelism (rank ", o.rank, " of ", o.size,
       "): this build has no CUDA/NCCL backend (configure with --preset cuda)");
}

void select_device(int device) {
  fail("select_device(", device, "): this build has no CUDA backend (configure with --preset cuda)");
}

int device_count() { return 0; }

#endif

}  // namespace brioche::ops
