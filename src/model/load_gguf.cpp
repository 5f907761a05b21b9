// GGUF checkpoints (llama.cpp files): metadata `<arch>.*` -> ModelConfig,
// tensors `blk.N.*` -> LayerWeights, used straight from the mmap.
//
// llama.cpp's converter permutes the Q/K rows of "llama" models so that RoPE
// rotates adjacent pairs (interleaved); qwen2/qwen3 files keep the Hugging
// Face order and use rotate-half (NeoX).
#include <string>

#include "core/error.h"
#include "formats/gguf.h"
#include "model/weights.h"

namespace brioche::model {

namespace {

// Every count is read as the file's int64 and narrowed by config_count, the
// finished config checked by validate_model_config (model_config.h) before
// the caller looks up a single tensor by it. The vocabulary comes from
// token_embd.weight's rows, read from the tensor table (no data touched).
ModelConfig read_config(const formats::GgufFile& f, const std::string& arch, const ConfigKeyNames& keys) {
  const std::string& path = f.path();
  auto key = [&](const char* suffix) { return arch + "." + suffix; };
  auto count = [&](const std::string& k, const formats::GgufValue* v) { return config_count(v->as_int(), k, path); };
  auto required_count = [&](const std::string& k) {
    const formats::GgufValue* v = f.find(k);
    if (v == nullptr) fail(path, ": metadata '", k, "' expected, found absent");
    return count(k, v);
  };
  auto optional_count = [&](const std::string& k, int fallback) {
    const formats::GgufValue* v = f.find(k);
    return v == nullptr ? fallback : count(k, v);
  };

  ModelConfig c;
  c.architecture = arch;
  c.hidden_size = required_count(keys.hidden_size);
  c.n_layers = required_count(keys.n_layers);
  c.n_heads = required_count(keys.n_heads);
  c.n_kv_heads = optional_count(keys.n_kv_heads, c.n_heads);
  c.intermediate_size = required_count(keys.intermediate_size);
  c.head_dim = f.find(keys.head_dim) != nullptr ? required_count(keys.head_dim)
                                                : derived_head_dim(c.hidden_size, c.n_heads, keys, path);
  // The vocabulary is token_embd.weight's rows (GGUF has no required key for it).
  const formats::GgufTensorInfo* embedding = f.find_tensor("token_embd.weight");
  if (embedding == nullptr) fail(path, ": tensor 'token_embd.weight' expected, not found");
  if (embedding->shape.size() != 2)
    fail(path, ": tensor 'token_embd.weight' expected rank 2 [vocab, hidden], found rank ", embedding->shape.size());
  c.vocab_size = config_count(embedding->shape[0], keys.vocab_size, path);
  c.rms_eps = config_float(f.get_float(keys.rms_eps, 1e-5));
  c.max_context = optional_count(keys.max_context, 0);
  c.rope.theta = config_float(f.get_float(keys.rope_theta, 10000.0));
  c.rope.style = (arch == "llama" || arch == "mistral") ? ops::RopeStyle::Interleaved : ops::RopeStyle::NeoX;
  std::string scaling = f.get_string(key("rope.scaling.type"), "none");
  float factor = config_float(f.get_float(keys.rope_factor, 0.0));
  if (scaling == "linear" && factor != 0.0f && factor != 1.0f) {
    c.rope.scaling = {.kind = ops::RopeScalingKind::Linear, .factor = factor};
  } else if (scaling != "none" && scaling != "linear") {
    fail(path, ": ", key("rope.scaling.type"), " '", scaling,
         "' is not supported (expected none or linear; llama3 scaling comes as rope_freqs.weight)");
  }
  validate_model_config(c, keys, path);

  int rotary_dims = optional_count(key("rope.dimension_count"), c.head_dim);
  BRIOCHE_CHECK(rotary_dims == c.head_dim, path, ": ", key("rope.dimension_count"), " expected ", c.head_dim,
                " (RoPE over the whole head), found ", rotary_dims);
  int value_dim = optional_count(key("attention.value_length"), c.head_dim);
  BRIOCHE_CHECK(value_dim == c.head_dim, path, ": ", key("attention.value_length"), " expected ", c.head_dim,
                " (= key_length), found ", value_dim);
  if (f.find_tensor("rope_freqs.weight") != nullptr) {
    // Shape first: the conversion must not copy a hostile tensor of any size.
    Tensor factors = f.tensor("rope_freqs.weight");
    check_shape(factors, {c.head_dim / 2}, "rope_freqs.weight", path);
    if (factors.dtype() == DType::I32) fail(path, ": tensor 'rope_freqs.weight' expected a float type, found i32");
    factors = to_f32(factors);
    c.rope.freq_factors.assign(factors.data_as<float>(), factors.data_as<float>() + c.head_dim / 2);
    validate_model_config(c, keys, path);
  }
  return c;
}

}  // namespace

Checkpoint load_gguf_checkpoint(const std::string& path) {
  Checkpoint ck;
  ck.source = path;
  ck.gguf = formats::GgufFile::open(path);
  const formats::GgufFile& f = *ck.gguf;
  std::string arch = f.get_string("general.architecture", "");
  if (arch.empty()) fail(path, ": metadata 'general.architecture' expected, found absent");
  if (!is_supported_architecture(arch)) fail_unsupported_architecture(arch, path);

  const ConfigKeyNames keys = ConfigKeyNames::gguf(arch);
  ModelConfig& c = ck.config = read_config(f, arch, keys);
  ModelWeights& w = ck.weights;
  w.token_embd = f.tensor("token_embd.weight");
  BRIOCHE_CHECK(w.token_embd.rank() == 2 && w.token_embd.dim(1) == c.hidden_size, path,
                ": tensor 'token_embd.weight' expected [vocab, ", c.hidden_size, "], found ", w.token_embd.describe());
  w.output_norm = f.tensor("output_norm.weight");
  check_shape(w.output_norm, {c.hidden_size}, "output_norm.weight", path);
  if (w.output_norm.dtype() == DType::I32) fail(path, ": tensor 'output_norm.weight' expected a float type, found i32");
  w.output_norm = to_f32(w.output_norm);
  c.tied_embeddings = f.find_tensor("output.weight") == nullptr;
  w.output = c.tied_embeddings ? w.token_embd : f.tensor("output.weight");
  check_shape(w.output, {c.vocab_size, c.hidden_size}, "output.weight", path);
  c.qkv_bias = f.find_tensor("blk.0.attn_q.bias") != nullptr;
  c.qk_norm = f.find_tensor("blk.0.attn_q_norm.weight") != nullptr;

  const int64_t hidden = c.hidden_size, q_dim = c.q_dim(), kv_dim = c.kv_dim(), inter = c.intermediate_size;
  for (int i = 0; i < c.n_layers; ++i) {
    std::string p = "blk." + std::to_string(i) + ".";
    auto matrix = [&](const std::string& name, int64_t rows, int64_t cols) {
      Tensor t = f.tensor(p + name);
      check_shape(t, {rows, cols}, p + name, path);
      return t;
    };
    auto vector = [&](const std::string& name, int64_t n) {
      Tensor t = f.tensor(p + name);
      check_shape(t, {n}, p + name, path);  // before the f32 copy, which a hostile size would make huge
      if (t.dtype() == DType::I32) fail(path, ": tensor '", p + name, "' expected a float type, found i32");
      return to_f32(t);
    };
    auto optional_vector = [&](const std::string& name, int64_t n) {
      return f.find_tensor(p + name) ? vector(name, n) : Tensor();
    };
    LayerWeights l;
    l.attn_norm = vector("attn_norm.weight", hidden);
    l.wq = matrix("attn_q.weight", q_dim, hidden);
    l.wk = matrix("attn_k.weight", kv_dim, hidden);
    l.wv = matrix("attn_v.weight", kv_dim, hidden);
    l.wo = matrix("attn_output.weight", hidden, q_dim);
    l.bq = optional_vector("attn_q.bias", q_dim);
    l.bk = optional_vector("attn_k.bias", kv_dim);
    l.bv = optional_vector("attn_v.bias", kv_dim);
    l.bo = optional_vector("attn_output.bias", hidden);
    if (c.qk_norm) {
      l.q_norm = vector("attn_q_norm.weight", c.head_dim);
      l.k_norm = vector("attn_k_norm.weight", c.head_dim);
    }
    l.ffn_norm = vector("ffn_norm.weight", hidden);
    l.w_gate = matrix("ffn_gate.weight", inter, hidden);
    l.w_up = matrix("ffn_up.weight", inter, hidden);
    l.w_down = matrix("ffn_down.weight", hidden, inter);
    w.layers.push_back(std::move(l));
  }
  c.weight_dtype = dominant_dtype(w);
  ck.chat_template = f.get_string("tokenizer.chat_template", "");
  return ck;
}

}  // namespace brioche::model
