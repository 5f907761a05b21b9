// safetensors reader: the JSON header is validated in full before any view is
// handed out (dtype known, shape sane, byte range = numel * size, inside the
// file, no two tensors overlapping).
#include <algorithm>
#include <cstring>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_limits.h"
#include "formats/mapped_file.h"
#include "formats/safetensors.h"

namespace brioche::formats {

namespace {

// The reference implementation refuses headers above 100 MB; so do we.
constexpr uint64_t kMaxHeaderBytes = 100u << 20;
constexpr size_t kMaxRankStored = 16;

struct HeaderContext {
  const std::string& file;
  const std::string& header;  // JSON text, starting at byte 8 of the file

  // Best-effort byte offset of a tensor's entry: where its quoted name appears.
  uint64_t offset_of(const std::string& name) const {
    std::string quoted = nlohmann::json(name).dump();
    size_t at = header.find(quoted);
    return 8 + (at == std::string::npos ? 0 : at);
  }

  template <typename... Parts>
  [[noreturn]] void error(uint64_t offset, const std::string& field, Parts&&... parts) const {
    fail(file, ": ", field, " at byte ", offset, ": ", std::forward<Parts>(parts)...);
  }
};

// Reads a non-negative integer that fits in int64 from a JSON value.
bool as_size(const nlohmann::json& v, uint64_t* out) {
  if (!v.is_number_unsigned()) return false;
  uint64_t x = v.get<uint64_t>();
  if (x > uint64_t(INT64_MAX)) return false;
  *out = x;
  return true;
}

}  // namespace

int safetensors_dtype_size(std::string_view dtype) {
  static constexpr struct {
    std::string_view name;
    int size;
  } kSizes[] = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},
      {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4},     {"I64", 8},     {"U64", 8}, {"F64", 8},
  };
  for (const auto& row : kSizes) {
    if (row.name == dtype) return row.size;
  }
  return 0;
}

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  auto mapping = MappedFile::open(path);
  const uint8_t* data = mapping->data();
  size_t size = mapping->size();
  return parse(data, size, path, std::move(mapping));
}

std::shared_ptr<SafetensorsFile> SafetensorsFile::parse(const void* data, size_t size, std::string name,
                                                        std::shared_ptr<void> owner) {
  auto file = std::make_shared<SafetensorsFile>();
  file->path_ = std::move(name);
  file->data_ = static_cast<const uint8_t*>(data);
  file->size_ = size;
  file->owner_ = std::move(owner);
  const std::string& path = file->path_;

  if (size < 8) fail(path, ": header length at byte 0: expected 8 bytes, found ", size);
  uint64_t header_len;
  std::memcpy(&header_len, file->data_, 8);
  if (header_len > kMaxHeaderBytes || header_len > size - 8) {
    fail(path, ": header length at byte 0: expected at most ", std::min<uint64_t>(kMaxHeaderBytes, size - 8),
         " (bytes after the length field, capped at 100 MB), found ", header_len);
  }
  std::string header(reinterpret_cast<const char*>(file->data_ + 8), size_t(header_len));
  HeaderContext ctx{path, header};
  // Nesting is bounded before parsing (core/json_limits.h): a header of
  // 100 MB of '[' would otherwise overflow the stack of whatever walks it.
  const int depth = json_nesting_depth(header);
  if (depth > kMaxJsonDepth) {
    ctx.error(8, "header JSON", "expected arrays/objects nested at most ", kMaxJsonDepth, " deep, found ", depth);
  }
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(header);
  } catch (const nlohmann::json::parse_error& e) {
    ctx.error(8 + (e.byte > 0 ? e.byte - 1 : 0), "header JSON", "expected valid JSON, found: ", e.what());
  } catch (const nlohmann::json::exception& e) {
    // Not a parse_error: out_of_range 406 for a number beyond double (1e400).
    ctx.error(8, "header JSON", "expected valid JSON, found: ", e.what());
  }
  if (!root.is_object()) ctx.error(8, "header JSON", "expected an object, found ", root.type_name());

  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = size - data_start;
  file->metadata_ = std::make_shared<nlohmann::json>(nlohmann::json::object());
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string& key = it.key();
    const nlohmann::json& entry = it.value();
    uint64_t at = ctx.offset_of(key);
    if (key == "__metadata__") {
      if (!entry.is_object()) ctx.error(at, "__metadata__", "expected an object, found ", entry.type_name());
      for (auto m = entry.begin(); m != entry.end(); ++m) {
        if (!m->is_string()) {
          ctx.error(at, "__metadata__." + m.key(), "expected a string value, found ", m->type_name());
        }
      }
      *file->metadata_ = entry;
      continue;
    }
    std::string field = "tensor '" + key + "'";
    if (!entry.is_object()) ctx.error(at, field, "expected an object, found ", entry.type_name());
    auto dtype_it = entry.find("dtype");
    if (dtype_it == entry.end() || !dtype_it->is_string()) {
      ctx.error(at, field + " dtype", "expected a string such as \"F32\", found ",
                dtype_it == entry.end() ? "nothing" : dtype_it->dump());
    }
    SafetensorsTensorInfo info;
    info.name = key;
    info.dtype = dtype_it->get<std::string>();
    int elem = safetensors_dtype_size(info.dtype);
    if (elem == 0) ctx.error(at, field + " dtype", "expected a known safetensors dtype, found \"", info.dtype, "\"");

    auto shape_it = entry.find("shape");
    if (shape_it == entry.end() || !shape_it->is_array() || shape_it->size() > kMaxRankStored) {
      ctx.error(at, field + " shape", "expected an array of at most ", kMaxRankStored, " sizes, found ",
                shape_it == entry.end() ? std::string("nothing") : shape_it->dump().substr(0, 80));
    }
    uint64_t numel = 1;
    for (const auto& d : *shape_it) {
      uint64_t n;
      if (!as_size(d, &n)) ctx.error(at, field + " shape", "expected non-negative sizes, found ", d.dump());
      if (__builtin_mul_overflow(numel, n, &numel) || numel > uint64_t(INT64_MAX)) {
        ctx.error(at, field + " shape", "expected an element count below 2^63, found an overflowing product");
      }
      info.shape.push_back(int64_t(n));
    }
    // A view's strides multiply the element size by every dim but the first,
    // zero or not (core/tensor.cpp): with zero dims read as 1 the product must
    // fit in int64 too, or [0, 2^40, 2^40] (no bytes) would overflow them.
    uint64_t stride_span = uint64_t(elem);
    for (const int64_t n : info.shape) {
      if (__builtin_mul_overflow(stride_span, uint64_t(std::max<int64_t>(n, 1)), &stride_span) ||
          stride_span > uint64_t(INT64_MAX)) {
        ctx.error(at, field + " shape",
                  "expected the byte size with zero dims read as 1 below 2^63, found an overflowing product");
      }
    }
    auto off_it = entry.find("data_offsets");
    uint64_t begin = 0, end = 0;
    if (off_it == entry.end() || !off_it->is_array() || off_it->size() != 2 || !as_size((*off_it)[0], &begin) ||
        !as_size((*off_it)[1], &end) || begin > end) {
      ctx.error(at, field + " data_offsets", "expected [begin, end] with 0 <= begin <= end, found ",
                off_it == entry.end() ? std::string("nothing") : off_it->dump().substr(0, 80));
    }
    uint64_t expected_bytes;
    if (__builtin_mul_overflow(numel, uint64_t(elem), &expected_bytes) || end - begin != expected_bytes) {
      ctx.error(at, field + " data_offsets", "expected ", numel, " x ", elem, " bytes for ", info.dtype, " shape ",
                shape_it->dump(), ", found ", end - begin, " bytes [", begin, ", ", end, ")");
    }
    if (end > data_size) {
      ctx.error(data_start + begin, field + " data", "expected bytes [", begin, ", ", end,
                ") of the data section to lie within its ", data_size, " bytes");
    }
    info.begin = data_start + begin;
    info.end = data_start + end;
    file->tensors_.push_back(std::move(info));
  }

  // Overlap check: sort the ranges by start; each must begin at or after the previous end.
  std::vector<const SafetensorsTensorInfo*> by_start;
  for (const auto& t : file->tensors_) {
    if (t.end > t.begin) by_start.push_back(&t);
  }
  std::sort(by_start.begin(), by_start.end(), [](const auto* a, const auto* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_start.size(); ++i) {
    if (by_start[i]->begin < by_start[i - 1]->end) {
      ctx.error(by_start[i]->begin, "tensor '" + by_start[i]->name + "' data", "expected no overlap with tensor '",
                by_start[i - 1]->name, "' (ending at byte ", by_start[i - 1]->end, "), found it starting at byte ",
                by_start[i]->begin);
    }
  }
  for (size_t i = 0; i < file->tensors_.size(); ++i) file->index_.emplace(file->tensors_[i].name, i);
  return file;
}

const SafetensorsTensorInfo* SafetensorsFile::find(std::string_view name) const {
  auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const nlohmann::json& SafetensorsFile::metadata() const { return *metadata_; }

RawTensor SafetensorsFile::raw(std::string_view name) const {
  const SafetensorsTensorInfo* info = find(name);
  if (info == nullptr) fail(path_, ": tensor '", name, "' expected, found absent (", tensors_.size(), " tensors)");
  return RawTensor{data_ + info->begin, size_t(info->end - info->begin), info->dtype, info->shape};
}

Tensor SafetensorsFile::tensor(std::string_view name) const {
  const SafetensorsTensorInfo* info = find(name);
  if (info == nullptr) fail(path_, ": tensor '", name, "' expected, found absent (", tensors_.size(), " tensors)");
  DType dtype;
  if (info->dtype == "F32")
    dtype = DType::F32;
  else if (info->dtype == "F16")
    dtype = DType::F16;
  else if (info->dtype == "BF16")
    dtype = DType::BF16;
  else if (info->dtype == "I32" || info->dtype == "U32")
    dtype = DType::I32;
  else
    fail(path_, ": tensor '", name, "' dtype ", info->dtype,
         " has no brioche DType (expected F32, F16, BF16, I32 or U32); use raw()");
  if (info->shape.size() > size_t(kMaxRank)) {
    fail(path_, ": tensor '", name, "' has rank ", info->shape.size(), ", expected at most ", kMaxRank);
  }
  std::vector<int64_t> shape = info->shape;
  if (shape.empty()) shape.push_back(1);  // a scalar becomes a one-element vector
  // The format allows empty tensors, but a Tensor's row size divides by its
  // innermost dim: a weight never has 0 there, so refuse it by name.
  if (shape.back() == 0) {
    fail(path_, ": tensor '", name, "' expected an innermost dim of at least 1 for a tensor view, found shape ",
         nlohmann::json(info->shape).dump());
  }
  // The mapping is private copy-on-write, so a writable pointer cannot alter the file.
  void* data = const_cast<uint8_t*>(data_ + info->begin);
  // The format does not align tensors (the reference writer pads its header
  // to 8 bytes, mlx's writer does not): a tensor at an offset its element
  // size does not divide is copied, since kernels read elements in place.
  if (reinterpret_cast<uintptr_t>(data) % dtype_info(dtype).block_bytes != 0) {
    Tensor copy = Tensor::zeros(dtype, shape.data(), int(shape.size()));
    std::memcpy(copy.data(), data, copy.nbytes());
    return copy;
  }
  return Tensor::view(data, dtype, shape.data(), int(shape.size()), owner_);
}

}  // namespace brioche::formats
