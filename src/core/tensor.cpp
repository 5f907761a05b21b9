#include "core/tensor.h"

#include <cstdlib>
#include <cstring>
#include <sstream>

#include "core/error.h"

namespace brioche {

namespace {

std::shared_ptr<Storage> allocate_cpu(size_t bytes, uint8_t fill) {
  size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  BRIOCHE_CHECK(p != nullptr, "out of memory: could not allocate ", bytes, " bytes");
  std::memset(p, fill, rounded == 0 ? 64 : rounded);
  auto storage = std::make_shared<Storage>();
  storage->data = p;
  storage->bytes = bytes;
  storage->device = Device::CPU;
  storage->owner = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  return storage;
}

void check_shape(DType dtype, const int64_t* shape, int rank) {
  BRIOCHE_CHECK(rank >= 1 && rank <= kMaxRank, "tensor rank must be 1..", kMaxRank, ", got ", rank);
  for (int i = 0; i < rank; ++i) {
    BRIOCHE_CHECK(shape[i] >= 0, "tensor dim ", i, " is negative (", shape[i], ")");
  }
  int block = dtype_info(dtype).block_elems;
  BRIOCHE_CHECK(shape[rank - 1] % block == 0, "innermost dim ", shape[rank - 1], " of a ", dtype_name(dtype),
                " tensor must be a multiple of its block size ", block);
}

}  // namespace

void Tensor::set_contiguous_strides() {
  auto info = dtype_info(dtype_);
  int64_t stride = info.quantized ? 0 : info.block_bytes;
  strides_ = {};
  strides_[rank_ - 1] = stride;
  int64_t row = int64_t(row_bytes(dtype_, shape_[rank_ - 1]));
  for (int i = rank_ - 2; i >= 0; --i) {
    strides_[i] = row;
    row *= shape_[i];
  }
}

Tensor Tensor::contiguous_layout(DType dtype, const int64_t* shape, int rank) {
  check_shape(dtype, shape, rank);
  Tensor t;
  t.dtype_ = dtype;
  t.rank_ = rank;
  for (int i = 0; i < rank; ++i) t.shape_[i] = shape[i];
  t.set_contiguous_strides();
  return t;
}

Tensor Tensor::zeros(DType dtype, const int64_t* shape, int rank) { return filled_bytes(dtype, shape, rank, 0); }

Tensor Tensor::zeros(DType dtype, std::initializer_list<int64_t> shape) {
  return zeros(dtype, shape.begin(), int(shape.size()));
}

Tensor Tensor::filled_bytes(DType dtype, const int64_t* shape, int rank, uint8_t byte) {
  Tensor t = contiguous_layout(dtype, shape, rank);
  t.storage_ = allocate_cpu(t.nbytes(), byte);
  return t;
}

Tensor Tensor::view(void* data, DType dtype, const int64_t* shape, int rank, std::shared_ptr<void> owner,
                    Device device) {
  Tensor t = contiguous_layout(dtype, shape, rank);
  t.storage_ = std::make_shared<Storage>();
  t.storage_->data = data;
  t.storage_->bytes = t.nbytes();
  t.storage_->device = device;
  t.storage_->owner = std::move(owner);
  return t;
}

Tensor Tensor::view(void* data, DType dtype, std::initializer_list<int64_t> shape, std::shared_ptr<void> owner,
                    Device device) {
  return view(data, dtype, shape.begin(), int(shape.size()), std::move(owner), device);
}

int64_t Tensor::numel() const {
  if (rank_ == 0) return 0;
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= shape_[i];
  return n;
}

size_t Tensor::nbytes() const {
  if (rank_ == 0) return 0;
  return size_t(numel() / shape_[rank_ - 1]) * row_bytes(dtype_, shape_[rank_ - 1]);
}

bool Tensor::is_contiguous() const {
  auto info = dtype_info(dtype_);
  if (!info.quantized && strides_[rank_ - 1] != info.block_bytes) return false;
  int64_t row = int64_t(row_bytes(dtype_, shape_[rank_ - 1]));
  for (int i = rank_ - 2; i >= 0; --i) {
    if (shape_[i] != 1 && strides_[i] != row) return false;
    row *= shape_[i];
  }
  return true;
}

Tensor Tensor::slice(int d, int64_t begin, int64_t end) const {
  if (d < 0) d += rank_;
  BRIOCHE_CHECK(d >= 0 && d < rank_, "slice dim ", d, " out of range for ", describe());
  BRIOCHE_CHECK(0 <= begin && begin <= end && end <= shape_[d], "slice [", begin, ", ", end, ") out of range for dim ",
                d, " of ", describe());
  Tensor t = *this;
  if (d == rank_ - 1) {
    auto info = dtype_info(dtype_);
    BRIOCHE_CHECK(begin % info.block_elems == 0 && end % info.block_elems == 0, "slice of the innermost dim of ",
                  describe(), " must align to blocks of ", info.block_elems);
    t.offset_ += row_bytes(dtype_, begin);
  } else {
    t.offset_ += size_t(begin * strides_[d]);
  }
  t.shape_[d] = end - begin;
  return t;
}

Tensor Tensor::reshape(std::initializer_list<int64_t> shape) const {
  BRIOCHE_CHECK(is_contiguous(), "reshape needs a contiguous tensor, got ", describe());
  Tensor t = *this;
  t.rank_ = int(shape.size());
  BRIOCHE_CHECK(t.rank_ >= 1 && t.rank_ <= kMaxRank, "reshape rank ", t.rank_);
  int i = 0;
  int64_t n = 1;
  for (int64_t s : shape) {
    t.shape_[i++] = s;
    n *= s;
  }
  for (; i < kMaxRank; ++i) t.shape_[i] = 0;
  BRIOCHE_CHECK(n == numel(), "reshape of ", describe(), " to ", n, " elements");
  check_shape(dtype_, t.shape_.data(), t.rank_);
  t.set_contiguous_strides();
  return t;
}

Tensor Tensor::select(int64_t i) const {
  BRIOCHE_CHECK(rank_ >= 2, "select needs rank >= 2, got ", describe());
  BRIOCHE_CHECK(i >= 0 && i < shape_[0], "select index ", i, " out of range for ", describe());
  Tensor t = *this;
  t.offset_ += size_t(i * strides_[0]);
  for (int k = 0; k + 1 < rank_; ++k) {
    t.shape_[k] = shape_[k + 1];
    t.strides_[k] = strides_[k + 1];
  }
  t.rank_ = rank_ - 1;
  t.shape_[t.rank_] = 0;
  t.strides_[t.rank_] = 0;
  return t;
}

std::string Tensor::describe() const {
  std::ostringstream out;
  out << dtype_name(dtype_) << "[";
  for (int i = 0; i < rank_; ++i) out << (i ? ", " : "") << shape_[i];
  out << "]";
  return out.str();
}

}  // namespace brioche
