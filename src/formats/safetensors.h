// Hugging Face safetensors: single files, model directories (config.json plus
// one file or an index of shards), MLX affine-quantized linears, and a writer.
//
// File layout: u64 header_len (little-endian), header_len bytes of JSON
//   {"<name>": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"k": "v"}}
// then the data section; offsets are relative to its start. The reader checks
// that every tensor's bytes equal numel * dtype size, lie inside the file and do
// not overlap; errors name the file, the tensor/field and the byte offset.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/tensor.h"

namespace brioche::formats {

struct SafetensorsTensorInfo {
  std::string name;
  std::string dtype;           // as written: "F32", "F16", "BF16", "U32", "I8", ...
  std::vector<int64_t> shape;  // row-major
  uint64_t begin;              // absolute file offsets [begin, end)
  uint64_t end;
};

// Bytes of tensor data that need no DType (MLX packed uint32 words, masks...).
struct RawTensor {
  const uint8_t* data = nullptr;
  size_t nbytes = 0;
  std::string dtype;
  std::vector<int64_t> shape;
};

// Element size of a safetensors dtype string ("BF16" -> 2), 0 when unknown.
int safetensors_dtype_size(std::string_view dtype);

class SafetensorsFile {
 public:
  static std::shared_ptr<SafetensorsFile> open(const std::string& path);
  // Parses from memory (fuzzing, tests); `owner` keeps `data` alive.
  static std::shared_ptr<SafetensorsFile> parse(const void* data, size_t size, std::string name,
                                                std::shared_ptr<void> owner = nullptr);

  const std::string& path() const { return path_; }
  const std::vector<SafetensorsTensorInfo>& tensors() const { return tensors_; }
  const SafetensorsTensorInfo* find(std::string_view name) const;
  bool has(std::string_view name) const { return find(name) != nullptr; }
  // Zero-copy view: F32/F16/BF16 as themselves, I32 and U32 as DType::I32
  // (same bits; U32 is MLX's packed-weight type). Other dtypes: use raw().
  Tensor tensor(std::string_view name) const;
  RawTensor raw(std::string_view name) const;
  const nlohmann::json& metadata() const;  // "__metadata__" object, or an empty object

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::shared_ptr<void> owner_;
  std::vector<SafetensorsTensorInfo> tensors_;
  std::unordered_map<std::string, size_t> index_;
  std::shared_ptr<nlohmann::json> metadata_;
};

// MLX affine quantization parameters of one linear.
struct AffineQuant {
  int bits;
  int group_size;
};

class SafetensorsDir {
 public:
  // Reads <dir>/config.json and <dir>/model.safetensors, or the shards listed
  // in <dir>/model.safetensors.index.json ("weight_map"), or any *.safetensors.
  static SafetensorsDir open(const std::string& dir);

  const std::string& path() const { return dir_; }
  const nlohmann::json& config() const;
  bool has(std::string_view name) const;
  std::vector<std::string> names() const;                       // sorted
  const SafetensorsFile& file_of(std::string_view name) const;  // throws naming the tensor
  Tensor tensor(std::string_view name) const;                   // plain weights, zero-copy
  RawTensor raw(std::string_view name) const;

  // MLX affine quantized linear: "<p>.weight" (U32 packed, [..., out, in*bits/32]),
  // "<p>.scales" and "<p>.biases" (bf16/f16/f32, [..., out, in/group]); bits
  // (2, 3, 4, 5, 6 or 8) and group_size (32, 64 or 128) from
  // config["quantization"] (or "quantization_config"), with per-module
  // overrides keyed by "<p>" (an object, or false = not quantized), as
  // mixed-precision quants write them.
  std::optional<AffineQuant> quantization(std::string_view prefix) const;
  bool is_quantized(std::string_view prefix) const;
  // Repacked into DType::AFFINE{4,8}_G{32,64,128} blocks (f32 scale, f32 bias,
  // packed q), shape [..., out, in]; a new CPU tensor. 2, 3, 5 and 6-bit
  // groups become 8-bit blocks (the same values, 8 bits of memory each).
  Tensor quantized_weight(std::string_view prefix) const;
  // A linear's weight "<p>": MLX-quantized when "<p>.scales" exists, else
  // the stored "<p>.weight" (zero-copy). A packed U32 weight without scales
  // is an error naming the missing tensor.
  Tensor linear_weight(std::string_view prefix) const;

 private:
  std::string dir_;
  std::shared_ptr<nlohmann::json> config_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::unordered_map<std::string, size_t> file_index_;  // tensor name -> files_ index
};

// Writes a safetensors file (LoRA adapters, fixtures, generated models),
// tensors in name order, 8-byte aligned like the reference writer. add()
// keeps the tensor's storage (shared, not copied: leave it unchanged until
// write); add_raw copies its bytes, or takes a vector's. write() streams to
// the file, so a model is held once (an 8B bf16 model was three times:
// the tensors, the writer's copies and the serialized file).
class SafetensorsWriter {
 public:
  void add(std::string name, const Tensor& tensor);  // CPU f32/f16/bf16/i32
  void add_raw(std::string name, std::string dtype, std::vector<int64_t> shape, const void* data, size_t nbytes);
  void add_raw(std::string name, std::string dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes);
  void set_metadata(std::map<std::string, std::string> metadata);
  std::vector<uint8_t> serialize() const;
  void write(const std::string& path) const;

 private:
  struct PendingTensor {
    std::string dtype;
    std::vector<int64_t> shape;
    std::shared_ptr<const void> owner;  // keeps `data` alive: the added tensor, or add_raw's vector
    const uint8_t* data;
    size_t size;
  };
  void check_entry(const std::string& name, const std::string& dtype, const std::vector<int64_t>& shape,
                   size_t nbytes) const;
  void write_to(std::ostream& out) const;
  std::map<std::string, PendingTensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace brioche::formats
