// Stream, caching allocator, copies and device tensors (see runtime.h).
#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "backend/cuda/capture_memory.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/runtime.h"

namespace brioche::cuda {

using detail::CaptureMemory;

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

int multiprocessor_count() {
  static const int sms = [] {
    int device = 0, v = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, device));
    return v;
  }();
  return sms;
}

MemoryInfo memory_info() {
  MemoryInfo info;
  CUDA_CHECK(cudaMemGetInfo(&info.free_bytes, &info.total_bytes));
  return info;
}

namespace {

// Streams are created on first use and never destroyed: kernels may still be
// queued when static destructors run.
cudaStream_t new_stream() {
  cudaStream_t created;
  CUDA_CHECK(cudaStreamCreateWithFlags(&created, cudaStreamNonBlocking));
  return created;
}

}  // namespace

void* stream() {
  static cudaStream_t s = new_stream();
  return s;
}

void synchronize() { CUDA_CHECK(cudaStreamSynchronize(detail::current_stream())); }

namespace {

// Size classes: multiples of 512 B up to 1 MiB, of 2 MiB above, so a freed
// block serves any later request of the same class.
size_t size_class(size_t bytes) {
  if (bytes == 0) bytes = 1;
  if (bytes <= (size_t(1) << 20)) return (bytes + 511) / 512 * 512;
  return (bytes + (size_t(2) << 20) - 1) / (size_t(2) << 20) * (size_t(2) << 20);
}

class CachingAllocator {
 public:
  void* take(size_t cls) {
    std::lock_guard lock(mutex_);
    void* p = nullptr;
    if (capture_ != nullptr && pop(capture_->free, cls, &p)) {
      // Freed earlier in this capture: the graph's own nodes run in order.
    } else if (pop(free_, cls, &p)) {
      stats_.bytes_cached -= cls;
    } else if (capture_ != nullptr) {
      // cudaMallocAsync would become a node of the graph; plain cudaMalloc
      // is allowed in a relaxed capture and gives ordinary memory.
      cudaError_t err = cudaMalloc(&p, cls);
      if (err != cudaSuccess) {
        cudaGetLastError();
        fail("CUDA out of memory while recording a graph: could not allocate ", cls, " bytes (", stats_.bytes_in_use,
             " in use, ", stats_.bytes_cached, " cached): ", cudaGetErrorString(err));
      }
      ++stats_.cuda_mallocs;
    } else {
      cudaError_t err = cudaMallocAsync(&p, cls, detail::current_stream());
      if (err == cudaErrorMemoryAllocation) {
        // Give the cache back and try once more before failing.
        cudaGetLastError();
        release_locked();
        err = cudaMallocAsync(&p, cls, detail::current_stream());
      }
      if (err != cudaSuccess) {
        cudaGetLastError();
        fail("CUDA out of memory: could not allocate ", cls, " bytes (", stats_.bytes_in_use, " in use, ",
             stats_.bytes_cached, " cached): ", cudaGetErrorString(err));
      }
      ++stats_.cuda_mallocs;
    }
    stats_.bytes_in_use += cls;
    stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
    return p;
  }

  void give(void* p, size_t cls) {
    std::lock_guard lock(mutex_);
    stats_.bytes_in_use -= cls;
    if (capture_ != nullptr) {
      // A graph's scratch memory belongs to the graph until it is destroyed:
      // handed to later work, a replay would overwrite that work's data.
      capture_->free[cls].push_back(p);
      return;
    }
    free_[cls].push_back(p);
    stats_.bytes_cached += cls;
  }

  void begin_capture(CaptureMemory* memory) {
    std::lock_guard lock(mutex_);
    BRIOCHE_CHECK(capture_ == nullptr, "cuda: a graph capture is already recording");
    capture_ = memory;
  }

  void end_capture() {
    std::lock_guard lock(mutex_);
    for (auto& [cls, blocks] : capture_->free) stats_.bytes_in_use += cls * blocks.size();
    capture_ = nullptr;
  }

  // A destroyed graph's memory goes back to the cache; work queued after the
  // graph's last replay on the same stream is the only user that can get it.
  void release_capture(CaptureMemory& memory) {
    for (auto& [cls, blocks] : memory.free) {
      for (void* p : blocks) give(p, cls);
      blocks.clear();
    }
  }

  AllocatorStats stats() {
    std::lock_guard lock(mutex_);
    return stats_;
  }

  void release() {
    std::lock_guard lock(mutex_);
    release_locked();
  }

 private:
  void release_locked() {
    for (auto& [cls, blocks] : free_) {
      for (void* p : blocks) cudaFreeAsync(p, detail::current_stream());
      stats_.bytes_cached -= cls * blocks.size();
      blocks.clear();
    }
    cudaStreamSynchronize(detail::current_stream());
  }

  static bool pop(std::map<size_t, std::vector<void*>>& pool, size_t cls, void** p) {
    auto it = pool.find(cls);
    if (it == pool.end() || it->second.empty()) return false;
    *p = it->second.back();
    it->second.pop_back();
    return true;
  }

  std::mutex mutex_;
  std::map<size_t, std::vector<void*>> free_;
  CaptureMemory* capture_ = nullptr;  // set while a graph is being recorded
  AllocatorStats stats_;
};

CachingAllocator& allocator() {
  static auto* a = new CachingAllocator();  // leaked: outlives every tensor
  return *a;
}

}  // namespace

std::shared_ptr<void> allocate(size_t bytes) {
  size_t cls = size_class(bytes);
  void* p = allocator().take(cls);
  return std::shared_ptr<void>(p, [cls](void* q) { allocator().give(q, cls); });
}

namespace detail {
namespace {
CaptureMemory* g_recording = nullptr;
}
void begin_capture_memory(CaptureMemory* memory) {
  allocator().begin_capture(memory);
  g_recording = memory;
}
void end_capture_memory() {
  allocator().end_capture();
  g_recording = nullptr;
}
CaptureMemory* recording_capture() { return g_recording; }
void release_capture_memory(CaptureMemory& memory) { allocator().release_capture(memory); }
}  // namespace detail

std::shared_ptr<void> allocate_pinned_host(size_t bytes) {
  void* p = nullptr;
  CUDA_CHECK(cudaMallocHost(&p, std::max<size_t>(bytes, 1)));
  return std::shared_ptr<void>(p, [](void* q) { cudaFreeHost(q); });
}

AllocatorStats allocator_stats() { return allocator().stats(); }
void release_cached_memory() { allocator().release(); }

void copy_to_device(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, detail::current_stream()));
}

void copy_to_host(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, detail::current_stream()));
  synchronize();
}

void copy_device_to_device(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, detail::current_stream()));
}

void fill_bytes(void* dst, uint8_t value, size_t bytes) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemsetAsync(dst, value, bytes, detail::current_stream()));
}

namespace {

cudaStream_t side_stream() {
  static cudaStream_t s = new_stream();
  return s;
}

// Records `event` (created on first use) on `on`.
void record_on(std::shared_ptr<void>& event, cudaStream_t on) {
  if (!event) {
    cudaEvent_t e;
    CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    event = std::shared_ptr<void>(e, [](void* p) { cudaEventDestroy(static_cast<cudaEvent_t>(p)); });
  }
  CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event.get()), on));
}

}  // namespace

void copy_on_side_stream(void* dst, const void* src, size_t bytes, SideCopyEvents& events) {
  record_on(events.queued, detail::current_stream());
  CUDA_CHECK(cudaStreamWaitEvent(side_stream(), static_cast<cudaEvent_t>(events.queued.get()), 0));
  if (bytes > 0) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, side_stream()));
  record_on(events.done, side_stream());
}

std::shared_ptr<void> copy_on_side_stream(void* dst, const void* src, size_t bytes) {
  SideCopyEvents events;
  copy_on_side_stream(dst, src, bytes, events);
  return events.done;
}

void record_event(std::shared_ptr<void>& event) { record_on(event, detail::current_stream()); }

void host_waits_for(const std::shared_ptr<void>& event) {
  if (event) CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event.get())));
}

void compute_waits_for(const std::shared_ptr<void>& copy_done) {
  if (copy_done)
    CUDA_CHECK(cudaStreamWaitEvent(detail::current_stream(), static_cast<cudaEvent_t>(copy_done.get()), 0));
}

namespace {

// A pinned staging buffer and its device copy. Copies from pinned memory are
// truly asynchronous (pageable ones may wait for the stream to drain); the
// event says when the staging buffer may be rewritten.
struct UploadSlot {
  std::vector<char> content;  // what the device copy holds, for the cache lookup
  void* pinned = nullptr;
  std::shared_ptr<void> device;
  size_t capacity = 0;
  cudaEvent_t copied = nullptr;
  uint64_t last_use = 0;  // when upload_cached last returned it
};

}  // namespace

const void* upload_cached(const void* host, size_t bytes) {
  static std::mutex mutex;
  static std::array<UploadSlot, 16> slots;
  static uint64_t clock = 0;
  std::lock_guard lock(mutex);
  if (bytes == 0) bytes = 1;  // a valid pointer even for empty spans
  if (detail::CaptureMemory* capture = detail::recording_capture()) {
    // A graph reads this buffer at every replay: it must never be reused.
    auto& up = capture->uploads.emplace_back();
    up.bytes.assign(static_cast<const char*>(host), static_cast<const char*>(host) + bytes);
    // Not from the allocator: during a capture it may hand out a block that
    // an earlier node of the same graph uses as scratch, which every replay
    // would overwrite before this buffer is read.
    void* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, bytes));
    up.device = std::shared_ptr<void>(p, [](void* q) { cudaFree(q); });
    return p;
  }
  ++clock;
  for (UploadSlot& s : slots) {
    if (s.device && s.content.size() == bytes && std::memcmp(s.content.data(), host, bytes) == 0) {
      s.last_use = clock;
      return s.device.get();
    }
  }
  // Least recently returned: a pointer handed out (a copy or a cache hit)
  // survives the next 15 calls, so a launcher may upload several
  // tables before its launch. (Replacing the oldest-written slot once evicted
  // RoPE frequencies returned by a hit just before the attention metadata's
  // upload, which then overwrote them.) The copy into the reused device
  // buffer is ordered after every kernel queued so far on the stream.
  UploadSlot& s = *std::min_element(slots.begin(), slots.end(),
                                    [](const UploadSlot& a, const UploadSlot& b) { return a.last_use < b.last_use; });
  s.last_use = clock;
  if (s.copied != nullptr)
    CUDA_CHECK(cudaEventSynchronize(s.copied));  // staging buffer free
  else
    CUDA_CHECK(cudaEventCreateWithFlags(&s.copied, cudaEventDisableTiming));
  if (s.capacity < bytes) {
    if (s.pinned != nullptr) CUDA_CHECK(cudaFreeHost(s.pinned));
    s.capacity = std::max<size_t>(bytes, 4096);
    CUDA_CHECK(cudaMallocHost(&s.pinned, s.capacity));
    s.device = allocate(s.capacity);
  }
  s.content.assign(static_cast<const char*>(host), static_cast<const char*>(host) + bytes);
  std::memcpy(s.pinned, host, bytes);
  CUDA_CHECK(cudaMemcpyAsync(s.device.get(), s.pinned, bytes, cudaMemcpyHostToDevice, detail::current_stream()));
  CUDA_CHECK(cudaEventRecord(s.copied, detail::current_stream()));
  return s.device.get();
}

Tensor empty(DType dtype, const int64_t* shape, int rank) {
  // Size through a throwaway view to reuse Tensor's shape checks.
  Tensor probe = Tensor::view(nullptr, dtype, shape, rank, nullptr, Device::CUDA);
  std::shared_ptr<void> memory = allocate(probe.nbytes());
  void* data = memory.get();
  return Tensor::view(data, dtype, shape, rank, std::move(memory), Device::CUDA);
}

Tensor empty(DType dtype, std::initializer_list<int64_t> shape) {
  return empty(dtype, shape.begin(), int(shape.size()));
}

namespace {

// The tensor as rows of whole bytes: (count, bytes per row, byte stride).
struct ByteRows {
  int64_t n_rows;
  size_t row_bytes;
  int64_t stride;
};

ByteRows byte_rows(const Tensor& t) {
  if (t.is_contiguous()) return {1, t.nbytes(), int64_t(t.nbytes())};
  // Non-contiguous: only the outer dims may have gaps; rows are contiguous.
  BRIOCHE_CHECK(t.rank() >= 2, "cuda copy: cannot copy non-contiguous ", t.describe());
  size_t inner = row_bytes(t.dtype(), t.dim(-1));
  int64_t rows = 1;
  for (int i = 0; i < t.rank() - 1; ++i) rows *= t.dim(i);
  BRIOCHE_CHECK(t.rank() == 2 || t.stride(-2) == int64_t(inner),
                "cuda copy: only rank-2 tensors may have a row stride, got ", t.describe());
  return {rows, inner, t.stride(t.rank() == 2 ? 0 : -2)};
}

}  // namespace

Tensor to_device(const Tensor& host) {
  BRIOCHE_CHECK(host.defined() && host.device() == Device::CPU, "to_device: expected a CPU tensor, got ",
                host.defined() ? host.describe() : std::string("an undefined tensor"));
  Tensor out = empty(host.dtype(), host.shape().data(), host.rank());
  ByteRows r = byte_rows(host);
  CUDA_CHECK(cudaMemcpy2DAsync(out.data(), r.row_bytes, host.data(), size_t(r.stride), r.row_bytes, size_t(r.n_rows),
                               cudaMemcpyHostToDevice, detail::current_stream()));
  return out;
}

Tensor to_host(const Tensor& dev) {
  BRIOCHE_CHECK(dev.defined() && dev.device() == Device::CUDA, "to_host: expected a CUDA tensor, got ",
                dev.defined() ? dev.describe() : std::string("an undefined tensor"));
  Tensor out = Tensor::zeros(dev.dtype(), dev.shape().data(), dev.rank());
  ByteRows r = byte_rows(dev);
  CUDA_CHECK(cudaMemcpy2DAsync(out.data(), r.row_bytes, dev.data(), size_t(r.stride), r.row_bytes, size_t(r.n_rows),
                               cudaMemcpyDeviceToHost, detail::current_stream()));
  synchronize();
  return out;
}

}  // namespace brioche::cuda
