#include "ops/device.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/env_switch.h"
#include "core/error.h"
#if BRIOCHE_CUDA
#include "backend/cuda/kernels.h"
#include "backend/cuda/runtime.h"
#endif

namespace brioche::ops {

namespace {

[[noreturn, maybe_unused]] void fail_no_cuda(const char* what) {  // (every use is in a !BRIOCHE_CUDA branch)
  fail(what, ": a CUDA tensor was requested but this build has no CUDA backend (configure with --preset cuda)");
}

// Rows of whole bytes: (rows, bytes per row, byte stride between rows).
struct ByteRows {
  int64_t n_rows;
  size_t row_bytes;
  size_t stride;
};

ByteRows byte_rows(const Tensor& t, const char* what) {
  BRIOCHE_CHECK(t.is_contiguous() || t.rank() == 2, "copy: ", what, " ", t.describe(),
                " must be contiguous or rank 2 with whole rows");
  if (t.rank() != 2) return {1, t.nbytes(), t.nbytes()};
  return {t.dim(0), row_bytes(t.dtype(), t.dim(1)), size_t(t.stride(0))};
}

}  // namespace

DeviceMemory device_memory(Device device) {
  BRIOCHE_CHECK(device == Device::CUDA, "device_memory: expected a CUDA device, got the CPU");
#if BRIOCHE_CUDA
  cuda::MemoryInfo info = cuda::memory_info();
  return DeviceMemory{.free_bytes = info.free_bytes, .total_bytes = info.total_bytes};
#else
  fail_no_cuda("device_memory");
#endif
}

bool cuda_available() {
#if BRIOCHE_CUDA
  return cuda::device_count() > 0;
#else
  return false;
#endif
}

Tensor zeros(DType dtype, std::initializer_list<int64_t> shape, Device device) {
  if (device == Device::CPU) return Tensor::zeros(dtype, shape);
#if BRIOCHE_CUDA
  Tensor t = cuda::empty(dtype, shape);
  cuda::fill_bytes(t.data(), 0, t.nbytes());
  return t;
#else
  fail_no_cuda("zeros");
#endif
}

namespace {

// A contiguous CPU tensor, 64-byte aligned like Tensor::zeros, left as the
// allocator returned it (no pass over its pages until the op writes them).
Tensor unfilled_host(DType dtype, std::initializer_list<int64_t> shape) {
  Tensor layout = Tensor::view(nullptr, dtype, shape, nullptr);  // only for nbytes()
  const size_t bytes = std::max<size_t>(64, (layout.nbytes() + 63) / 64 * 64);
  void* p = std::aligned_alloc(64, bytes);
  BRIOCHE_CHECK(p != nullptr, "out of memory: could not allocate ", layout.nbytes(), " bytes");
  return Tensor::view(p, dtype, shape, std::shared_ptr<void>(p, [](void* q) { std::free(q); }));
}

}  // namespace

Tensor uninitialized(DType dtype, std::initializer_list<int64_t> shape, Device device) {
  constexpr uint8_t kPoison = 0xFF;  // NaN as f32, f16 and bf16
  static const bool poison = env_flag_set("BRIOCHE_POISON");
  if (device == Device::CPU) {
    if (poison) return Tensor::filled_bytes(dtype, shape.begin(), int(shape.size()), kPoison);
    return unfilled_host(dtype, shape);
  }
#if BRIOCHE_CUDA
  Tensor t = cuda::empty(dtype, shape);
  if (poison) cuda::fill_bytes(t.data(), kPoison, t.nbytes());
  return t;
#else
  fail_no_cuda("uninitialized");
#endif
}

Tensor pinned_host_zeros(DType dtype, std::initializer_list<int64_t> shape) {
#if BRIOCHE_CUDA
  if (cuda_available()) {
    Tensor probe = Tensor::view(nullptr, dtype, shape, nullptr);  // (size through Tensor's shape checks)
    std::shared_ptr<void> memory = cuda::allocate_pinned_host(probe.nbytes());
    std::memset(memory.get(), 0, probe.nbytes());
    void* data = memory.get();
    return Tensor::view(data, dtype, shape, std::move(memory), Device::CPU);
  }
#endif
  return Tensor::zeros(dtype, shape);
}

std::span<int32_t> StagedUpload::fill(size_t count) {
  current_ ^= 1;
  Buffer& b = buffers_[current_];
#if BRIOCHE_CUDA
  cuda::host_waits_for(b.read);
#endif
  if (!b.host.defined() || size_t(b.host.numel()) < count)
    b.host = pinned_host_zeros(DType::I32, {int64_t(std::max<size_t>(count, 1024))});
  count_ = count;
  return {b.host.data_as<int32_t>(), count};
}

void StagedUpload::upload(Tensor& dst) {
  dst.note_written();
  Buffer& b = buffers_[current_];
  BRIOCHE_CHECK(b.host.defined() && dst.dtype() == DType::I32 && dst.is_contiguous() && size_t(dst.numel()) == count_,
                "StagedUpload::upload: expected a dense i32 destination of the ", count_, " values filled, got ",
                dst.describe());
  copy(b.host.slice(0, 0, int64_t(count_)), dst);
#if BRIOCHE_CUDA
  if (dst.device() == Device::CUDA) cuda::record_event(b.read);
#endif
}

Tensor to_device(const Tensor& t, Device device) {
  if (!t.defined() || t.device() == device) return t;
#if BRIOCHE_CUDA
  return device == Device::CUDA ? cuda::to_device(t) : cuda::to_host(t);
#else
  fail_no_cuda("to_device");
#endif
}

void copy(const Tensor& src, Tensor& dst) {
  dst.note_written();
  BRIOCHE_CHECK(src.dtype() == dst.dtype() && src.shape() == dst.shape() && src.rank() == dst.rank(), "copy: source ",
                src.describe(), " and destination ", dst.describe(), " differ");
  ByteRows s = byte_rows(src, "source"), d = byte_rows(dst, "destination");
  if (s.stride == s.row_bytes && d.stride == d.row_bytes) {  // both dense: one copy, not one per row
    s = d = {1, s.row_bytes * size_t(s.n_rows), s.row_bytes * size_t(s.n_rows)};
  }
  if (src.device() == Device::CPU && dst.device() == Device::CPU) {
    for (int64_t r = 0; r < s.n_rows; ++r)
      std::memcpy(static_cast<char*>(dst.data()) + r * d.stride, static_cast<const char*>(src.data()) + r * s.stride,
                  s.row_bytes);
    return;
  }
#if BRIOCHE_CUDA
  for (int64_t r = 0; r < s.n_rows; ++r) {
    void* to = static_cast<char*>(dst.data()) + r * d.stride;
    const void* from = static_cast<const char*>(src.data()) + r * s.stride;
    if (src.device() == Device::CUDA && dst.device() == Device::CUDA)
      cuda::copy_device_to_device(to, from, s.row_bytes);
    else if (dst.device() == Device::CUDA)
      cuda::copy_to_device(to, from, s.row_bytes);
    else
      cuda::copy_to_host(to, from, s.row_bytes);
  }
#else
  fail_no_cuda("copy");
#endif
}

void PendingCopy::wait() {
#if BRIOCHE_CUDA
  cuda::compute_waits_for(done_);
#endif
  done_.reset();
}

PendingCopy copy_async(const Tensor& src, Tensor& dst) {
  dst.note_written();
  BRIOCHE_CHECK(src.dtype() == dst.dtype() && src.shape() == dst.shape() && src.is_contiguous() && dst.is_contiguous(),
                "copy_async: source ", src.describe(), " and destination ", dst.describe(), " must match and be dense");
  PendingCopy pending;
  if (src.device() == Device::CPU && dst.device() == Device::CPU) {
    copy(src, dst);
    return pending;
  }
#if BRIOCHE_CUDA
  pending.done_ = cuda::copy_on_side_stream(dst.data(), src.data(), src.nbytes());
  return pending;
#else
  fail_no_cuda("copy_async");
#endif
}

void synchronize(Device device) {
#if BRIOCHE_CUDA
  if (device == Device::CUDA) cuda::synchronize();
#else
  if (device == Device::CUDA) fail_no_cuda("synchronize");
#endif
}

void argmax_rows(const Tensor& logits, std::span<int32_t> ids) {
  BRIOCHE_CHECK(logits.rank() == 2 && logits.dtype() == DType::F32 && logits.stride(1) == 4,
                "argmax_rows: logits must be f32 [n, vocab] with contiguous rows, got ", logits.describe());
  BRIOCHE_CHECK(int64_t(ids.size()) == logits.dim(0), "argmax_rows: ", ids.size(), " ids for ", logits.dim(0), " rows");
  const int64_t n = logits.dim(1), stride = logits.stride(0) / 4;
  if (logits.device() == Device::CUDA) {
#if BRIOCHE_CUDA
    cuda::argmax_rows(logits.data_as<float>(), logits.dim(0), n, stride, ids);
    return;
#else
    fail_no_cuda("argmax_rows");
#endif
  }
  for (int64_t r = 0; r < logits.dim(0); ++r) {
    const float* row = logits.data_as<float>() + r * stride;
    ids[r] = int32_t(std::max_element(row, row + n) - row);
  }
}

}  // namespace brioche::ops
