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

ModelConfig read_config(const formats::GgufFile& f, const std::string& arch) {
  const std::string& path = f.path();
  auto key = [&](const char* suffix) { return arch + "." + suffix; };
  auto required_int = [&](const char* suffix) {
    const formats::GgufValue* v = f.find(key(suffix));
    if (v == nullptr) fail(path, ": metadata '", key(suffix), "' expected, found absent");
    return int(v->as_int());
  };

  ModelConfig c;
  c.architecture = arch;
  c.hidden_size = required_int("embedding_length");
  c.n_layers = required_int("block_count");
  c.n_heads = required_int("attention.head_count");
  c.n_kv_heads = int(f.get_int(key("attention.head_count_kv"), c.n_heads));
  c.intermediate_size = required_int("feed_forward_length");
  c.head_dim = int(f.get_int(key("attention.key_length"), c.hidden_size / c.n_heads));
  c.rms_eps = float(f.get_float(key("attention.layer_norm_rms_epsilon"), 1e-5));
  c.max_context = int(f.get_int(key("context_length"), 0));
  c.rope.theta = float(f.get_float(key("rope.freq_base"), 10000.0));
  c.rope.style = (arch == "llama" || arch == "mistral") ? ops::RopeStyle::Interleaved
                                                        : ops::RopeStyle::NeoX;
  int rotary_dims = int(f.get_int(key("rope.dimension_count"), c.head_dim));
  BRIOCHE_CHECK(rotary_dims == c.head_dim, path, ": ", key("rope.dimension_count"), " expected ",
                c.head_dim, " (RoPE over the whole head), found ", rotary_dims);
  int value_dim = int(f.get_int(key("attention.value_length"), c.head_dim));
  BRIOCHE_CHECK(value_dim == c.head_dim, path, ": ", key("attention.value_length"), " expected ",
                c.head_dim, " (= key_length), found ", value_dim);

  std::string scaling = f.get_string(key("rope.scaling.type"), "none");
  float factor = float(f.get_float(key("rope.scaling.factor"), 0.0));
  if (scaling == "linear" && factor > 0.0f && factor != 1.0f) {
    c.rope.scaling = {.kind = ops::RopeScalingKind::Linear, .factor = factor};
  } else if (scaling != "none" && scaling != "linear") {
    fail(path, ": ", key("rope.scaling.type"), " '", scaling,
         "' is not supported (expected none or linear; llama3 scaling comes as rope_freqs.weight)");
  }
  if (f.find_tensor("rope_freqs.weight") != nullptr) {
    Tensor factors = to_f32(f.tensor("rope_freqs.weight"));
    check_shape(factors, {c.head_dim / 2}, "rope_freqs.weight", path);
    c.rope.freq_factors.assign(factors.data_as<float>(), factors.data_as<float>() + c.head_dim / 2);
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

  ModelConfig& c = ck.config = read_config(f, arch);
  ModelWeights& w = ck.weights;
  w.token_embd = f.tensor("token_embd.weight");
  BRIOCHE_CHECK(w.token_embd.rank() == 2 && w.token_embd.dim(1) == c.hidden_size, path,
                ": tensor 'token_embd.weight' expected [vocab, ", c.hidden_size, "], found ",
                w.token_embd.describe());
  c.vocab_size = int(w.token_embd.dim(0));
  w.output_norm = to_f32(f.tensor("output_norm.weight"));
  check_shape(w.output_norm, {c.hidden_size}, "output_norm.weight", path);
  c.tied_embeddings = f.find_tensor("output.weight") == nullptr;
  w.output = c.tied_embeddings ? w.token_embd : f.tensor("output.weight");
  check_shape(w.output, {c.vocab_size, c.hidden_size}, "output.weight", path);
  c.qkv_bias = f.find_tensor("blk.0.attn_q.bias") != nullptr;
  c.qk_norm = f.find_tensor("blk.0.attn_q_norm.weight") != nullptr;

  const int64_t hidden = c.hidden_size, q_dim = c.q_dim(), kv_dim = c.kv_dim(),
                inter = c.intermediate_size;
  for (int i = 0; i < c.n_layers; ++i) {
    std::string p = "blk." + std::to_string(i) + ".";
    auto matrix = [&](const std::string& name, int64_t rows, int64_t cols) {
      Tensor t = f.tensor(p + name);
      check_shape(t, {rows, cols}, p + name, path);
      return t;
    };
    auto vector = [&](const std::string& name, int64_t n) {
      Tensor t = to_f32(f.tensor(p + name));
      check_shape(t, {n}, p + name, path);
      return t;
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
