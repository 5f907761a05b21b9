// Hugging Face model directories: config.json plus one safetensors file or an
// index of shards; MLX affine-quantized linears repacked into brioche blocks.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/half.h"
#include "core/json_limits.h"
#include "core/thread_pool.h"
#include "formats/regular_file.h"
#include "formats/safetensors.h"

namespace brioche::formats {

namespace fs = std::filesystem;

namespace {

// A JSON file next to the weights: a regular file (a FIFO named config.json
// must not hang the load), at most `max_bytes`, nested at most kMaxJsonDepth.
nlohmann::json read_json_file(const std::string& path, size_t max_bytes) {
  std::string text = read_regular_file(path, max_bytes);
  const int depth = json_nesting_depth(text);
  if (depth > kMaxJsonDepth) {
    fail(path, ": expected arrays/objects nested at most ", kMaxJsonDepth, " deep, found ", depth);
  }
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    fail(path, ": JSON at byte ", e.byte > 0 ? e.byte - 1 : 0, ": expected valid JSON, found: ", e.what());
  } catch (const nlohmann::json::exception& e) {
    // Not a parse_error: out_of_range 406 for a number beyond double (1e400).
    fail(path, ": expected valid JSON, found: ", e.what());
  }
}

// A shard name from an index must stay inside the model directory.
void check_shard_name(const std::string& index_path, const std::string& tensor, const std::string& shard) {
  fs::path p(shard);
  bool escapes = p.is_absolute() || shard.empty();
  for (const auto& part : p) escapes = escapes || part == "..";
  if (escapes) {
    fail(index_path, ": weight_map['", tensor, "']: expected a file name inside the directory, found \"", shard, "\"");
  }
}

// One scale or bias of a group as f32, whatever its stored float type.
float load_float(const RawTensor& t, size_t i) {
  if (t.dtype == "F32") {
    float f;
    std::memcpy(&f, t.data + 4 * i, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, t.data + 2 * i, 2);
  return t.dtype == "BF16" ? bf16_to_f32(h) : f16_to_f32(h);
}

// One group of `n` values of `bits` bits (value j at bit j·bits of the
// little-endian byte stream, as MLX packs any width) -> one byte each.
void widen_to_bytes(const uint8_t* packed, int bits, int n, uint8_t* out) {
  const unsigned mask = (1u << bits) - 1;
  for (int j = 0; j < n; ++j) {
    const size_t bit = size_t(j) * size_t(bits);
    // A value spans at most two bytes (bits <= 6); the second is inside the
    // group whenever the value reaches into it.
    unsigned two = packed[bit / 8];
    if (bit % 8 + size_t(bits) > 8) two |= unsigned(packed[bit / 8 + 1]) << 8;
    out[j] = uint8_t((two >> (bit % 8)) & mask);
  }
}

}  // namespace

SafetensorsDir SafetensorsDir::open(const std::string& dir) {
  SafetensorsDir out;
  out.dir_ = dir;
  // The error_code forms: a path the user gave must not throw
  // std::filesystem_error (no brioche::Error) from a stat that fails.
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    fail(dir, ": expected a model directory, found ", fs::exists(dir, ec) ? "a file" : "nothing");
  std::string config_path = (fs::path(dir) / "config.json").string();
  if (!fs::exists(config_path, ec)) fail(config_path, ": expected the model's config.json, found nothing");
  out.config_ = std::make_shared<nlohmann::json>(read_json_file(config_path, kMaxConfigJsonBytes));
  if (!out.config_->is_object()) fail(config_path, ": expected a JSON object, found ", out.config_->type_name());

  std::string index_path = (fs::path(dir) / "model.safetensors.index.json").string();
  std::string single_path = (fs::path(dir) / "model.safetensors").string();
  std::vector<std::string> shard_files;
  std::set<std::string> shard_names;
  nlohmann::json weight_map;
  if (fs::exists(index_path, ec)) {
    nlohmann::json index = read_json_file(index_path, kMaxIndexJsonBytes);
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
      fail(index_path, ": expected an object with a \"weight_map\" object");
    }
    weight_map = index["weight_map"];
    for (auto it = weight_map.begin(); it != weight_map.end(); ++it) {
      if (!it->is_string()) {
        fail(index_path, ": weight_map['", it.key(), "']: expected a file name, found ", it->dump());
      }
      std::string shard = it->get<std::string>();
      check_shard_name(index_path, it.key(), shard);
      shard_names.insert(std::move(shard));
    }
    // A set, not a find per entry: an index of a million distinct shard
    // names must fail on the first missing shard, not after 10^12 compares.
    shard_files.assign(shard_names.begin(), shard_names.end());
  } else if (fs::exists(single_path, ec)) {
    shard_files.push_back("model.safetensors");
  } else {
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      if (entry.path().extension() == ".safetensors") shard_files.push_back(entry.path().filename().string());
    }
    std::sort(shard_files.begin(), shard_files.end());
    if (shard_files.empty()) {
      fail(dir, ": expected model.safetensors, model.safetensors.index.json or *.safetensors, found none");
    }
  }

  for (const auto& shard : shard_files) {
    auto file = SafetensorsFile::open((fs::path(dir) / shard).string());
    size_t file_id = out.files_.size();
    for (const auto& t : file->tensors()) {
      auto [it, inserted] = out.file_index_.emplace(t.name, file_id);
      if (!inserted) {
        fail(file->path(), ": tensor '", t.name, "' expected once in the directory, found again (first in ",
             out.files_[it->second]->path(), ")");
      }
    }
    out.files_.push_back(std::move(file));
  }
  for (auto it = weight_map.begin(); it != weight_map.end(); ++it) {
    auto found = out.file_index_.find(it.key());
    std::string shard_path = (fs::path(dir) / it->get<std::string>()).string();
    if (found == out.file_index_.end() || out.files_[found->second]->path() != shard_path) {
      fail(index_path, ": weight_map['", it.key(), "']: expected the tensor in ", it->get<std::string>(), ", found ",
           found == out.file_index_.end() ? std::string("it in no shard")
                                          : "it in " + out.files_[found->second]->path());
    }
  }
  return out;
}

const nlohmann::json& SafetensorsDir::config() const { return *config_; }

bool SafetensorsDir::has(std::string_view name) const { return file_index_.count(std::string(name)) != 0; }

std::vector<std::string> SafetensorsDir::names() const {
  std::vector<std::string> out;
  out.reserve(file_index_.size());
  for (const auto& [name, id] : file_index_) out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

const SafetensorsFile& SafetensorsDir::file_of(std::string_view name) const {
  auto it = file_index_.find(std::string(name));
  if (it == file_index_.end()) {
    fail(dir_, ": tensor '", name, "' expected, found absent (", file_index_.size(), " tensors)");
  }
  return *files_[it->second];
}

Tensor SafetensorsDir::tensor(std::string_view name) const { return file_of(name).tensor(name); }

RawTensor SafetensorsDir::raw(std::string_view name) const { return file_of(name).raw(name); }

std::optional<AffineQuant> SafetensorsDir::quantization(std::string_view prefix) const {
  const nlohmann::json* q = nullptr;
  for (const char* key : {"quantization", "quantization_config"}) {
    auto it = config_->find(key);
    if (it == config_->end() || it->is_null()) continue;
    if (!it->is_object())
      fail(dir_, "/config.json: ", key, ": expected an object (bits, group_size, per-module entries), found ",
           it->type_name());
    q = &*it;
    break;
  }
  if (q == nullptr) return std::nullopt;
  std::string where = dir_ + "/config.json: quantization";
  // MLX's other modes (mxfp4, nvfp4, mxfp8) have no bias and a shared
  // exponent per group: not affine blocks.
  auto check_mode = [&](const nlohmann::json& obj, const std::string& at) {
    auto mode = obj.find("mode");
    if (mode != obj.end() && *mode != "affine")
      fail(where, at, ".mode: expected \"affine\" (MLX's mxfp4/nvfp4/mxfp8 are not supported), found ",
           mode->dump().substr(0, 80));
  };
  check_mode(*q, "");
  auto read_int = [&](const nlohmann::json& obj, const char* key, const std::string& at, int fallback) {
    auto it = obj.find(key);
    if (it == obj.end()) {
      if (fallback > 0) return fallback;
      fail(where, at, ": expected an integer \"", key, "\", found nothing");
    }
    // Range-checked before narrowing: 2^32 + 4 must not read as 4.
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > 1024) {
      fail(where, at, ".", key, ": expected an integer in 0..1024, found ", it->dump().substr(0, 80));
    }
    return int(it->get<int64_t>());
  };
  // Per-module overrides (mixed-precision quants, mlx-lm's quant_predicate)
  // are keyed by the module's path, which is the tensor name's prefix.
  auto layer = q->find(std::string(prefix));
  if (layer != q->end()) {
    if (layer->is_boolean() && !layer->get<bool>()) return std::nullopt;
    if (layer->is_object()) {
      std::string at = "['" + std::string(prefix) + "']";
      check_mode(*layer, at);
      int bits = read_int(*layer, "bits", at, q->contains("bits") ? read_int(*q, "bits", "", 0) : 0);
      int group = read_int(*layer, "group_size", at, q->contains("group_size") ? read_int(*q, "group_size", "", 0) : 0);
      return AffineQuant{bits, group};
    }
  }
  return AffineQuant{read_int(*q, "bits", "", 0), read_int(*q, "group_size", "", 0)};
}

bool SafetensorsDir::is_quantized(std::string_view prefix) const {
  std::string p(prefix);
  return has(p + ".scales") && quantization(prefix).has_value();
}

Tensor SafetensorsDir::linear_weight(std::string_view prefix) const {
  const std::string p(prefix);
  if (has(p + ".scales")) return quantized_weight(prefix);
  const SafetensorsTensorInfo* w = file_of(p + ".weight").find(p + ".weight");
  // A packed weight without its scales would read as an i32 matrix of the
  // wrong width: name what is missing instead.
  if (w->dtype == "U32") {
    auto quant = quantization(prefix);
    fail(dir_, ": tensor '", p, ".scales' expected beside the MLX-packed (U32) '", p, ".weight'",
         quant ? " (config.json quantization: bits " + std::to_string(quant->bits) + ", group_size " +
                     std::to_string(quant->group_size) + ")"
               : std::string(" (and config.json has no quantization block)"),
         ", found absent");
  }
  return tensor(p + ".weight");
}

Tensor SafetensorsDir::quantized_weight(std::string_view prefix) const {
  std::string p(prefix);
  auto quant = quantization(prefix);
  if (!quant) fail(dir_, ": '", p, "' expected MLX quantization in config.json, found none for it");
  // brioche's blocks hold 4 or 8 bits; MLX's 2, 3, 5 and 6-bit groups are
  // widened to 8-bit groups with the same scale and bias (exact: q < 2^bits
  // fits a byte), at 8 bits' memory.
  const int stored_bits = quant->bits;
  const bool widen = stored_bits == 2 || stored_bits == 3 || stored_bits == 5 || stored_bits == 6;
  DType dtype;
  if (!(stored_bits == 4 || stored_bits == 8 || widen) ||
      !affine_dtype(widen ? 8 : stored_bits, quant->group_size, &dtype)) {
    fail(dir_, ": '", p, "' quantization expected bits 2, 3, 4, 5, 6 or 8 and group_size 32, 64 or 128, found bits ",
         stored_bits, " group_size ", quant->group_size);
  }
  RawTensor w = raw(p + ".weight");  // [..., out, in * bits / 32] u32 words
  RawTensor s = raw(p + ".scales");  // [..., out, in / group]
  RawTensor b = raw(p + ".biases");  // [..., out, in / group]
  const std::string& wfile = file_of(p + ".weight").path();
  if (w.dtype != "U32") fail(wfile, ": tensor '", p, ".weight' expected dtype U32 (MLX packed), found ", w.dtype);
  if (w.shape.size() < 2 || w.shape.size() > size_t(kMaxRank)) {
    fail(wfile, ": tensor '", p, ".weight' expected rank 2..", kMaxRank, ", found ", w.shape.size());
  }
  const int64_t words_per_row = w.shape.back();
  // The repacked tensor's rows are `in` long; a row of 0 has no blocks to
  // size it by (and a Tensor divides by its innermost dim).
  if (words_per_row < 1) {
    fail(wfile, ": tensor '", p, ".weight' expected at least one u32 word per row, found shape ",
         nlohmann::json(w.shape).dump());
  }
  if (words_per_row * 32 % stored_bits != 0) {
    fail(wfile, ": tensor '", p, ".weight' has ", words_per_row, " u32 words per row, expected a multiple of ",
         stored_bits, " for ", stored_bits, "-bit groups (config.json quantization)");
  }
  const int64_t in = words_per_row * 32 / stored_bits;
  const int64_t groups = in / quant->group_size;
  if (in % quant->group_size != 0) {
    fail(wfile, ": tensor '", p, ".weight' has ", in, " inputs per row (", words_per_row, " words of ", stored_bits,
         "-bit values), expected a multiple of group_size ", quant->group_size, " (config.json quantization)");
  }
  for (const RawTensor* t : {&s, &b}) {
    const char* what = t == &s ? ".scales" : ".biases";
    if (t->dtype != "F32" && t->dtype != "F16" && t->dtype != "BF16") {
      fail(file_of(p + what).path(), ": tensor '", p, what, "' expected dtype F32, F16 or BF16, found ", t->dtype);
    }
    std::vector<int64_t> expected(w.shape.begin(), w.shape.end() - 1);
    expected.push_back(groups);
    if (t->shape != expected) {
      fail(file_of(p + what).path(), ": tensor '", p, what, "' expected shape ", nlohmann::json(expected).dump(), " (",
           in, " inputs in groups of ", quant->group_size, " by config.json), found ", nlohmann::json(t->shape).dump());
    }
  }
  std::vector<int64_t> shape(w.shape.begin(), w.shape.end() - 1);
  shape.push_back(in);
  Tensor out = Tensor::zeros(dtype, shape.data(), int(shape.size()));
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < shape.size(); ++i) rows *= shape[i];
  // MLX packs element j of a row at bit j*bits of its u32 words, least
  // significant first; on a little-endian host those bytes already are the
  // block's packed q (element j at bit j*bits of the byte stream), so a group
  // is two f32 values followed by a plain copy of its group*bits/8 bytes.
  const size_t q_bytes = size_t(quant->group_size) * size_t(stored_bits) / 8;  // bytes of one stored group
  const size_t block_bytes = size_t(dtype_info(dtype).block_bytes);
  uint8_t* dst = static_cast<uint8_t*>(out.data());
  ThreadPool::global().parallel_for(rows, 64, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const uint8_t* q_row = w.data + size_t(r) * size_t(words_per_row) * 4;
      uint8_t* block = dst + size_t(r) * size_t(groups) * block_bytes;
      for (int64_t g = 0; g < groups; ++g, block += block_bytes) {
        float scale = load_float(s, size_t(r * groups + g));
        float bias = load_float(b, size_t(r * groups + g));
        std::memcpy(block, &scale, 4);
        std::memcpy(block + 4, &bias, 4);
        if (widen)
          widen_to_bytes(q_row + size_t(g) * q_bytes, stored_bits, quant->group_size, block + 8);
        else
          std::memcpy(block + 8, q_row + size_t(g) * q_bytes, q_bytes);
      }
    }
  });
  return out;
}

}  // namespace brioche::formats
