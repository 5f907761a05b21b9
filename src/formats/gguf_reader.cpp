// GGUF header parser. Every read is bounds-checked against the buffer, every
// count is checked against the bytes that remain before memory is reserved,
// and each failure names the file, the field and its byte offset.
#include <bit>
#include <cstring>
#include <unordered_set>

#include "core/error.h"
#include "formats/gguf.h"
#include "formats/mapped_file.h"

namespace brioche::formats {

static_assert(std::endian::native == std::endian::little, "GGUF reader assumes a little-endian host");

namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint32_t kMaxDims = 4;             // GGML_MAX_DIMS
constexpr int kMaxArrayDepth = 8;            // nested arrays deeper than this are hostile
constexpr uint64_t kMaxAlignment = uint64_t(1) << 30;

struct GgmlTypeRow {
  uint32_t id;
  std::string_view name;
  bool supported;
  DType dtype;
};

// ggml's type ids (ggml.h enum ggml_type); brioche maps the ones it can run.
constexpr GgmlTypeRow kGgmlTypes[] = {
    {0, "F32", true, DType::F32},      {1, "F16", true, DType::F16},       {2, "Q4_0", true, DType::Q4_0},
    {3, "Q4_1", true, DType::Q4_1},    {6, "Q5_0", false, DType::F32},     {7, "Q5_1", false, DType::F32},
    {8, "Q8_0", true, DType::Q8_0},    {9, "Q8_1", false, DType::F32},     {10, "Q2_K", false, DType::F32},
    {11, "Q3_K", false, DType::F32},   {12, "Q4_K", true, DType::Q4_K},    {13, "Q5_K", true, DType::Q5_K},
    {14, "Q6_K", true, DType::Q6_K},   {15, "Q8_K", false, DType::F32},    {16, "IQ2_XXS", false, DType::F32},
    {17, "IQ2_XS", false, DType::F32}, {18, "IQ3_XXS", false, DType::F32}, {19, "IQ1_S", false, DType::F32},
    {20, "IQ4_NL", false, DType::F32}, {21, "IQ3_S", false, DType::F32},   {22, "IQ2_S", false, DType::F32},
    {23, "IQ4_XS", false, DType::F32}, {24, "I8", false, DType::F32},      {25, "I16", false, DType::F32},
    {26, "I32", true, DType::I32},     {27, "I64", false, DType::F32},     {28, "F64", false, DType::F32},
    {29, "IQ1_M", false, DType::F32},  {30, "BF16", true, DType::BF16},    {34, "TQ1_0", false, DType::F32},
    {35, "TQ2_0", false, DType::F32},  {39, "MXFP4", false, DType::F32},
};

std::string_view ggml_type_name(uint32_t id) {
  for (const auto& row : kGgmlTypes) {
    if (row.id == id) return row.name;
  }
  return "unknown";
}

// Smallest encoding of one element of each metadata type: bounds array counts.
uint64_t min_encoded_size(GgufType t) {
  switch (t) {
    case GgufType::U8:
    case GgufType::I8:
    case GgufType::BOOL: return 1;
    case GgufType::U16:
    case GgufType::I16: return 2;
    case GgufType::U32:
    case GgufType::I32:
    case GgufType::F32: return 4;
    case GgufType::U64:
    case GgufType::I64:
    case GgufType::F64: return 8;
    case GgufType::STRING: return 8;     // u64 length
    case GgufType::ARRAY: return 4 + 8;  // element type + count
  }
  return 1;
}

bool valid_type(uint32_t t) { return t <= uint32_t(GgufType::F64); }

}  // namespace

bool ggml_type_to_dtype(uint32_t ggml_type, DType* out) {
  for (const auto& row : kGgmlTypes) {
    if (row.id == ggml_type && row.supported) {
      *out = row.dtype;
      return true;
    }
  }
  return false;
}

uint32_t dtype_to_ggml_type(DType dtype) {
  for (const auto& row : kGgmlTypes) {
    if (row.supported && row.dtype == dtype) return row.id;
  }
  fail("dtype ", dtype_name(dtype), " has no GGUF tensor type");
}

// Cursor over the header bytes; `field` names what is being read for errors.
class GgufParser {
 public:
  GgufParser(const uint8_t* data, size_t size, const std::string& name) : data_(data), size_(size), name_(name) {}

  void parse(GgufFile& file);

 private:
  const uint8_t* data_;
  size_t size_;
  const std::string& name_;
  uint64_t pos_ = 0;
  std::vector<uint64_t> tensor_offset_fields_;  // byte position of each tensor's offset field

  uint64_t remaining() const { return size_ - pos_; }

  template <typename... Parts>
  [[noreturn]] void error_at(uint64_t offset, const std::string& field, Parts&&... parts) const {
    fail(name_, ": ", field, " at byte ", offset, ": ", std::forward<Parts>(parts)...);
  }

  void need(uint64_t bytes, const std::string& field) const {
    if (bytes > remaining()) {
      error_at(pos_, field, "expected ", bytes, " bytes, found ", remaining(), " (file ends at byte ", size_, ")");
    }
  }

  template <typename T>
  T read(const std::string& field) {
    need(sizeof(T), field);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  // A count of items each taking at least `min_item_bytes`: more than the
  // remaining bytes can hold means a corrupt or hostile file.
  uint64_t read_count(const std::string& field, uint64_t min_item_bytes) {
    uint64_t at = pos_;
    uint64_t n = read<uint64_t>(field);
    if (n > remaining() / min_item_bytes) {
      error_at(at, field, "expected at most ", remaining() / min_item_bytes, " (bytes left in the file / ",
               min_item_bytes, "), found ", n);
    }
    return n;
  }

  std::string read_string(const std::string& field) {
    uint64_t n = read_count(field + " length", 1);
    std::string s(reinterpret_cast<const char*>(data_ + pos_), size_t(n));
    pos_ += n;
    return s;
  }

  GgufType read_type(const std::string& field) {
    uint64_t at = pos_;
    uint32_t t = read<uint32_t>(field);
    if (!valid_type(t)) error_at(at, field, "expected a GGUF value type 0..12, found ", t);
    return GgufType(t);
  }

  uint64_t read_scalar(GgufType t, const std::string& field);
  GgufValue read_value(GgufType t, const std::string& field, int depth);
  void read_array(GgufValue& v, const std::string& field, int depth);
  void read_tensor_info(GgufFile& file, uint64_t index);
};

uint64_t GgufParser::read_scalar(GgufType t, const std::string& field) {
  switch (t) {
    case GgufType::U8: return read<uint8_t>(field);
    case GgufType::I8: return uint64_t(int64_t(read<int8_t>(field)));
    case GgufType::U16: return read<uint16_t>(field);
    case GgufType::I16: return uint64_t(int64_t(read<int16_t>(field)));
    case GgufType::U32: return read<uint32_t>(field);
    case GgufType::I32: return uint64_t(int64_t(read<int32_t>(field)));
    case GgufType::U64: return read<uint64_t>(field);
    case GgufType::I64: return uint64_t(read<int64_t>(field));
    case GgufType::F32: return std::bit_cast<uint64_t>(double(read<float>(field)));
    case GgufType::F64: return std::bit_cast<uint64_t>(read<double>(field));
    case GgufType::BOOL: {
      uint64_t at = pos_;
      uint8_t b = read<uint8_t>(field);
      if (b > 1) error_at(at, field, "expected bool 0 or 1, found ", int(b));
      return b;
    }
    default: break;
  }
  fail("GgufParser::read_scalar: not a scalar type");
}

void GgufParser::read_array(GgufValue& v, const std::string& field, int depth) {
  if (depth >= kMaxArrayDepth) {
    error_at(pos_, field, "expected arrays nested at most ", kMaxArrayDepth, " deep, found deeper");
  }
  v.type_ = GgufType::ARRAY;
  v.element_type_ = read_type(field + " element type");
  uint64_t n = read_count(field + " element count", min_encoded_size(v.element_type_));
  switch (v.element_type_) {
    case GgufType::STRING:
      v.strings_.reserve(n);
      for (uint64_t i = 0; i < n; ++i) v.strings_.push_back(read_string(field + "[" + std::to_string(i) + "]"));
      break;
    case GgufType::ARRAY:
      v.items_.reserve(n);
      for (uint64_t i = 0; i < n; ++i) {
        v.items_.push_back(read_value(GgufType::ARRAY, field + "[" + std::to_string(i) + "]", depth + 1));
      }
      break;
    default:
      v.words_.reserve(n);
      // Elements are fixed-size and the count was bounded above by the bytes left.
      for (uint64_t i = 0; i < n; ++i) v.words_.push_back(read_scalar(v.element_type_, field));
      break;
  }
}

GgufValue GgufParser::read_value(GgufType t, const std::string& field, int depth) {
  GgufValue v;
  v.type_ = t;
  if (t == GgufType::STRING) {
    v.string_ = read_string(field);
  } else if (t == GgufType::ARRAY) {
    read_array(v, field, depth);
  } else {
    v.scalar_ = read_scalar(t, field);
  }
  return v;
}

void GgufParser::read_tensor_info(GgufFile& file, uint64_t index) {
  std::string field = "tensor #" + std::to_string(index);
  GgufTensorInfo info;
  info.name = read_string(field + " name");
  field += " ('" + info.name + "')";
  uint64_t dims_at = pos_;
  uint32_t n_dims = read<uint32_t>(field + " n_dims");
  if (n_dims < 1 || n_dims > kMaxDims) {
    error_at(dims_at, field + " n_dims", "expected 1..", kMaxDims, ", found ", n_dims);
  }
  uint64_t ne_at = pos_;
  int64_t ne[kMaxDims];
  int64_t numel = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    uint64_t at = pos_;
    uint64_t n = read<uint64_t>(field + " ne[" + std::to_string(d) + "]");
    // Zero is refused too: no weight is empty, and a Tensor's row size
    // divides by its innermost dim (a [.., 0] view was a SIGFPE).
    if (n == 0 || n > uint64_t(INT64_MAX)) {
      error_at(at, field + " ne[" + std::to_string(d) + "]", "expected a size in 1..2^63-1, found ", n);
    }
    ne[d] = int64_t(n);
    if (__builtin_mul_overflow(numel, ne[d], &numel)) {
      error_at(ne_at, field + " shape", "expected an element count below 2^63, found an overflowing product");
    }
  }
  uint64_t type_at = pos_;
  info.ggml_type = read<uint32_t>(field + " type");
  if (!ggml_type_to_dtype(info.ggml_type, &info.dtype)) {
    error_at(type_at, field + " type", "unsupported tensor type ", info.ggml_type, " (", ggml_type_name(info.ggml_type),
             ") for tensor '", info.name, "'; supported: F32, F16, BF16, I32, Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K");
  }
  auto dinfo = dtype_info(info.dtype);
  if (ne[0] % dinfo.block_elems != 0) {
    error_at(ne_at, field + " ne[0]", "expected a multiple of the ", dtype_name(info.dtype), " block size ",
             dinfo.block_elems, ", found ", ne[0]);
  }
  // nbytes = rows * (ne[0] / block_elems) * block_bytes, each product checked.
  uint64_t rows = ne[0] == 0 ? 0 : uint64_t(numel / ne[0]);
  uint64_t row_size, nbytes;
  if (__builtin_mul_overflow(uint64_t(ne[0] / dinfo.block_elems), uint64_t(dinfo.block_bytes), &row_size) ||
      __builtin_mul_overflow(rows, row_size, &nbytes) || nbytes > uint64_t(INT64_MAX)) {
    error_at(ne_at, field + " shape", "expected a byte size below 2^64, found an overflowing product");
  }
  info.nbytes = nbytes;
  for (uint32_t d = 0; d < n_dims; ++d) info.shape.push_back(ne[n_dims - 1 - d]);
  uint64_t offset_at = pos_;
  info.offset = read<uint64_t>(field + " offset");  // relative for now; made absolute later
  if (info.offset % file.alignment_ != 0) {
    error_at(offset_at, field + " offset", "expected a multiple of the alignment ", file.alignment_, ", found ",
             info.offset);
  }
  file.tensors_.push_back(std::move(info));
  tensor_offset_fields_.push_back(offset_at);
}

void GgufParser::parse(GgufFile& file) {
  uint32_t magic = read<uint32_t>("magic");
  if (magic != kGgufMagic) {
    error_at(0, "magic", "expected \"GGUF\" (0x46554747), found 0x", std::hex, magic);
  }
  uint32_t version = read<uint32_t>("version");
  if (version == 1) {
    error_at(4, "version", "expected GGUF version 2 or 3, found 1 (GGUF v1 is obsolete; re-convert the model)");
  }
  if (version != 2 && version != 3) {
    if (__builtin_bswap32(version) == 2 || __builtin_bswap32(version) == 3) {
      error_at(4, "version", "expected a little-endian GGUF version 2 or 3, found a big-endian file");
    }
    error_at(4, "version", "expected GGUF version 2 or 3, found ", version);
  }
  file.version_ = version;
  // Bounds: a tensor info takes at least 8 (name) + 4 + 8 (one dim) + 4 + 8
  // bytes; a key/value at least 8 (key) + 4 (type) + 1 (u8 value).
  uint64_t n_tensors = read_count("tensor count", 32);
  uint64_t n_kv = read_count("metadata count", 13);

  std::unordered_set<std::string> seen_keys;
  file.metadata_.reserve(n_kv);
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string field = "metadata #" + std::to_string(i);
    uint64_t key_at = pos_;
    std::string key = read_string(field + " key");
    if (!seen_keys.insert(key).second)
      error_at(key_at, field + " key", "expected a unique key, found '", key, "' again");
    field += " ('" + key + "')";
    GgufType type = read_type(field + " type");
    uint64_t value_at = pos_;
    GgufValue value = read_value(type, field + " value", 0);
    value.key_ = key;
    if (key == "general.alignment") {
      bool is_int = type == GgufType::U8 || type == GgufType::U16 || type == GgufType::U32 || type == GgufType::U64 ||
                    type == GgufType::I32 || type == GgufType::I64;
      if (!is_int) error_at(value_at, field + " value", "expected u32, found ", value.describe());
      uint64_t a = value.scalar_;
      if (a == 0 || a > kMaxAlignment || (a & (a - 1)) != 0) {
        error_at(value_at, field + " value", "expected a power of two up to 2^30, found ", value.describe());
      }
      file.alignment_ = a;
    }
    file.metadata_.emplace_back(std::move(key), std::move(value));
  }

  file.tensors_.reserve(n_tensors);
  std::unordered_set<std::string> seen_names;
  for (uint64_t i = 0; i < n_tensors; ++i) {
    uint64_t at = pos_;
    read_tensor_info(file, i);
    if (!seen_names.insert(file.tensors_.back().name).second) {
      error_at(at, "tensor #" + std::to_string(i) + " name", "expected a unique name, found '",
               file.tensors_.back().name, "' again");
    }
  }

  // The data section starts at the next multiple of the alignment.
  uint64_t header_end = pos_;
  uint64_t data_start = (header_end + file.alignment_ - 1) / file.alignment_ * file.alignment_;
  file.data_offset_ = data_start;
  for (size_t i = 0; i < file.tensors_.size(); ++i) {
    auto& t = file.tensors_[i];
    uint64_t begin, end;
    bool overflow =
        __builtin_add_overflow(data_start, t.offset, &begin) || __builtin_add_overflow(begin, uint64_t(t.nbytes), &end);
    if (overflow || end > size_) {
      error_at(tensor_offset_fields_[i], "tensor #" + std::to_string(i) + " ('" + t.name + "') data", "expected ",
               t.nbytes, " bytes at data offset ", t.offset, " (byte ", data_start, " + ", t.offset,
               ") to lie within the file of ", size_, " bytes, found them ending at byte ",
               overflow ? std::string("beyond 2^64") : std::to_string(end));
    }
    t.offset = begin;
  }
}

std::shared_ptr<GgufFile> GgufFile::parse(const void* data, size_t size, std::string name,
                                          std::shared_ptr<void> owner) {
  auto file = std::make_shared<GgufFile>();
  file->path_ = std::move(name);
  file->data_ = static_cast<const uint8_t*>(data);
  file->size_ = size;
  file->owner_ = std::move(owner);
  GgufParser(file->data_, size, file->path_).parse(*file);
  for (size_t i = 0; i < file->metadata_.size(); ++i) file->metadata_index_.emplace(file->metadata_[i].first, i);
  for (size_t i = 0; i < file->tensors_.size(); ++i) file->tensor_index_.emplace(file->tensors_[i].name, i);
  return file;
}

std::shared_ptr<GgufFile> GgufFile::open(const std::string& path) {
  auto mapping = MappedFile::open(path);
  const uint8_t* data = mapping->data();
  size_t size = mapping->size();
  return parse(data, size, path, std::move(mapping));
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = metadata_index_.find(std::string(key));
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

const GgufValue& GgufFile::get(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) fail(path_, ": metadata key '", key, "' expected, found absent");
  return *v;
}

std::string GgufFile::get_string(std::string_view key, std::string fallback) const {
  const GgufValue* v = find(key);
  return v == nullptr ? fallback : v->as_string();
}

int64_t GgufFile::get_int(std::string_view key, int64_t fallback) const {
  const GgufValue* v = find(key);
  return v == nullptr ? fallback : v->as_int();
}

double GgufFile::get_float(std::string_view key, double fallback) const {
  const GgufValue* v = find(key);
  return v == nullptr ? fallback : v->as_float();
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

Tensor GgufFile::tensor(std::string_view name) const {
  const GgufTensorInfo* info = find_tensor(name);
  if (info == nullptr) fail(path_, ": tensor '", name, "' expected, found absent (", tensors_.size(), " tensors)");
  // The mapping is private copy-on-write, so a writable pointer cannot alter the file.
  void* data = const_cast<uint8_t*>(data_ + info->offset);
  return Tensor::view(data, info->dtype, info->shape.data(), int(info->shape.size()), owner_);
}

}  // namespace brioche::formats
