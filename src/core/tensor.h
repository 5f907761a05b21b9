// Tensor: a typed, strided view over storage on a device.
//
// Shapes are row-major like PyTorch: dim(rank-1) is the innermost, so a linear
// weight is [out_features, in_features] and GGUF's ne[] appears reversed.
// Strides are in bytes. For quantized dtypes the innermost dimension counts
// elements and must be a multiple of the block size; rows are packed blocks,
// so only the outer strides are meaningful (stride(rank-1) is 0 for them).
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

#include "core/dtype.h"

namespace brioche {

enum class Device : uint8_t { CPU, CUDA };

// The device as the `--device` flag spells it, for messages.
inline const char* device_name(Device d) { return d == Device::CUDA ? "cuda" : "cpu"; }

inline constexpr int kMaxRank = 4;

using Shape = std::array<int64_t, kMaxRank>;

// Memory a tensor views. `owner` keeps it alive: an aligned heap buffer, a
// device allocation, or a memory-mapped file shared by many weight tensors.
struct Storage {
  void* data = nullptr;
  size_t bytes = 0;
  Device device = Device::CPU;
  std::shared_ptr<void> owner;
  // Writes so far by ops (every op bumps it on the tensors it writes, before
  // writing): ops::NormHandoff checks that none came between its two ops.
  uint64_t version = 0;
};

class Tensor {
 public:
  Tensor() = default;

  // A new zero-filled contiguous CPU tensor (64-byte aligned).
  static Tensor zeros(DType dtype, std::initializer_list<int64_t> shape);
  static Tensor zeros(DType dtype, const int64_t* shape, int rank);
  // The same with every byte set to `byte` (0xFF: NaN in every float type).
  static Tensor filled_bytes(DType dtype, const int64_t* shape, int rank, uint8_t byte);
  // A contiguous view of external memory kept alive by `owner` (e.g. an mmap).
  static Tensor view(void* data, DType dtype, std::initializer_list<int64_t> shape, std::shared_ptr<void> owner,
                     Device device = Device::CPU);
  static Tensor view(void* data, DType dtype, const int64_t* shape, int rank, std::shared_ptr<void> owner,
                     Device device = Device::CPU);

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device : Device::CPU; }
  int rank() const { return rank_; }
  int64_t dim(int i) const { return shape_[i < 0 ? i + rank_ : i]; }
  int64_t stride(int i) const { return strides_[i < 0 ? i + rank_ : i]; }
  const Shape& shape() const { return shape_; }
  int64_t numel() const;
  // Bytes spanned by the elements (contiguous size); 0 for an undefined tensor.
  size_t nbytes() const;
  bool is_contiguous() const;

  void* data() const { return static_cast<char*>(storage_->data) + offset_; }
  template <typename T>
  T* data_as() const {
    return static_cast<T*>(data());
  }
  // Pointer to row `i` of a rank-2 tensor (or the i-th slice along dim 0).
  void* row_ptr(int64_t i) const { return static_cast<char*>(data()) + i * strides_[0]; }
  template <typename T>
  T* row_as(int64_t i) const {
    return static_cast<T*>(row_ptr(i));
  }

  // Views sharing storage.
  Tensor slice(int dim, int64_t begin, int64_t end) const;
  Tensor reshape(std::initializer_list<int64_t> shape) const;  // contiguous only
  Tensor select(int64_t i) const;                              // drop dim 0

  std::string describe() const;  // "f32[2, 3]"
  // Its storage's write count (Storage::version); 0 when undefined.
  uint64_t version() const { return storage_ ? storage_->version : 0; }
  // An op is writing it: bumps Storage::version.
  void note_written() const {
    if (storage_) ++storage_->version;
  }
  const std::shared_ptr<Storage>& storage() const { return storage_; }

 private:
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;
  DType dtype_ = DType::F32;
  int rank_ = 0;
  Shape shape_{};
  Shape strides_{};

  void set_contiguous_strides();
  // Shape, dtype and contiguous strides, without storage yet.
  static Tensor contiguous_layout(DType dtype, const int64_t* shape, int rank);
};

}  // namespace brioche
