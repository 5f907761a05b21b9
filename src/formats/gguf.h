// GGUF (llama.cpp model files), versions 2 and 3: reader over an mmap and a writer.
//
// File layout (all little-endian):
//   magic "GGUF", u32 version, u64 n_tensors, u64 n_kv,
//   n_kv x { string key, u32 type, value },
//   n_tensors x { string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type, u64 offset },
//   padding to `alignment`, tensor data (each tensor at data_start + offset).
// A string is u64 length + bytes; an array is u32 element type + u64 count + elements.
// Every count and length is checked against the bytes left in the file before
// anything is allocated, so a hostile header can only produce a brioche::Error
// of the form "<file>: <field> at byte <offset>: expected ..., found ...".
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace brioche::formats {

enum class GgufType : uint32_t { U8 = 0, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 };

std::string_view gguf_type_name(GgufType type);  // "u32", "string", "array", ...

// One metadata value. Scalars keep their GGUF type; arrays keep their element
// type and store elements compactly (numbers as 64-bit words, strings as
// strings, nested arrays as values). Accessors throw brioche::Error naming the
// key (when the value came from a file) on a type mismatch.
class GgufValue {
 public:
  GgufValue() = default;

  // Builders (used by the writer and tests).
  static GgufValue integer(GgufType type, int64_t value);  // U8..I64 (not F32/F64/BOOL)
  static GgufValue floating(GgufType type, double value);  // F32 or F64
  static GgufValue boolean(bool value);
  static GgufValue string(std::string value);
  static GgufValue ints(GgufType element_type, const std::vector<int64_t>& values);
  static GgufValue floats(GgufType element_type, const std::vector<double>& values);
  static GgufValue bools(const std::vector<bool>& values);
  static GgufValue strings(std::vector<std::string> values);
  static GgufValue arrays(std::vector<GgufValue> values);  // nested arrays (each an ARRAY)

  GgufType type() const { return type_; }
  GgufType element_type() const;  // arrays only
  bool is_array() const { return type_ == GgufType::ARRAY; }
  const std::string& key() const { return key_; }  // empty unless read from a file
  void set_key(std::string key) { key_ = std::move(key); }

  int64_t as_int() const;    // any integer type (u64 above INT64_MAX throws), bool as 0/1
  uint64_t as_uint() const;  // non-negative integer
  double as_float() const;   // F32/F64, or any integer
  bool as_bool() const;      // BOOL only
  const std::string& as_string() const;

  size_t array_size() const;
  GgufValue at(size_t i) const;  // element i of an array (copy)
  std::vector<std::string> as_strings() const;
  const std::vector<std::string>& string_list() const;  // no copy; STRING arrays only
  std::vector<float> as_floats() const;                 // numeric arrays
  std::vector<int64_t> as_ints() const;                 // integer arrays
  const std::vector<GgufValue>& nested() const;         // array of arrays

  std::string describe() const;  // "u32 7", "string \"llama\"", "array<string>[49152]"

 private:
  friend class GgufParser;
  friend class GgufWriter;
  GgufType type_ = GgufType::U8;
  GgufType element_type_ = GgufType::U8;
  uint64_t scalar_ = 0;  // integer: value as int64 bits (u64 raw); float: double bits; bool: 0/1
  std::string string_;
  std::vector<uint64_t> words_;       // numeric/bool array elements, same encoding as scalar_
  std::vector<std::string> strings_;  // STRING array elements
  std::vector<GgufValue> items_;      // ARRAY array elements
  std::string key_;

  [[noreturn]] void mismatch(std::string_view expected) const;
};

struct GgufTensorInfo {
  std::string name;
  DType dtype;
  uint32_t ggml_type;          // raw ggml type id as stored
  std::vector<int64_t> shape;  // row-major, i.e. ggml ne[] reversed
  uint64_t offset;             // absolute file offset of the first byte
  size_t nbytes;
};

// ggml type id -> DType; false for ids brioche does not support.
bool ggml_type_to_dtype(uint32_t ggml_type, DType* out);
uint32_t dtype_to_ggml_type(DType dtype);  // throws for non-GGUF dtypes (I32, AFFINE*)

class GgufFile {
 public:
  // Maps the file and parses its header. Throws brioche::Error
  // "<file>: <field> at byte <offset>: expected ..., found ...".
  static std::shared_ptr<GgufFile> open(const std::string& path);
  // Parses a header from memory (fuzzing, tests). `owner` keeps `data` alive
  // for tensor views; `name` stands for the file in error messages.
  static std::shared_ptr<GgufFile> parse(const void* data, size_t size, std::string name,
                                         std::shared_ptr<void> owner = nullptr);

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // start of the tensor data section
  size_t file_size() const { return size_; }

  const GgufValue* find(std::string_view key) const;  // nullptr if absent
  const GgufValue& get(std::string_view key) const;   // throws naming the key if absent
  std::string get_string(std::string_view key, std::string fallback) const;
  int64_t get_int(std::string_view key, int64_t fallback) const;
  double get_float(std::string_view key, double fallback) const;
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(std::string_view name) const;
  // Zero-copy view into the mapping (the view keeps the mapping alive).
  // Throws naming the tensor if absent.
  Tensor tensor(std::string_view name) const;

 private:
  friend class GgufParser;
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::shared_ptr<void> owner_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::vector<GgufTensorInfo> tensors_;
  std::unordered_map<std::string, size_t> metadata_index_;
  std::unordered_map<std::string, size_t> tensor_index_;
};

// Writes GGUF version 3 files (tests, fuzz seeds, the random-weight model
// generator). Alignment is general.alignment when added (a power of two), else 32.
// write() streams the tensors' bytes to the file, so a model is held once.
class GgufWriter {
 public:
  void add(std::string key, GgufValue value);
  // CPU tensor of any GGUF dtype (incl. quantized); its storage is shared, not
  // copied: leave it unchanged until write.
  void add_tensor(std::string name, const Tensor& tensor);
  std::vector<uint8_t> serialize() const;
  void write(const std::string& path) const;

 private:
  struct PendingTensor {
    std::string name;
    Tensor tensor;
  };
  void write_to(std::ostream& out) const;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace brioche::formats
