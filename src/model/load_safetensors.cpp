// Hugging Face safetensors directories: config.json -> ModelConfig, tensors
// `model.layers.N.*` -> LayerWeights (MLX affine-quantized linears repacked).
//
// Weights are in Hugging Face order, so RoPE is rotate-half (NeoX) for every
// architecture here. RoPE settings come from "rope_parameters" (transformers
// 5) or "rope_theta" + "rope_scaling" (older configs).
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "formats/safetensors.h"
#include "model/weights.h"

namespace brioche::model {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string architecture_of(const json& cfg, const std::string& dir) {
  static const std::pair<const char*, const char*> kClasses[] = {
      {"LlamaForCausalLM", "llama"}, {"MistralForCausalLM", "mistral"},
      {"Qwen2ForCausalLM", "qwen2"}, {"Qwen3ForCausalLM", "qwen3"}};
  if (cfg.contains("model_type") && cfg["model_type"].is_string()) {
    return cfg["model_type"].get<std::string>();
  }
  if (cfg.contains("architectures") && cfg["architectures"].is_array() && !cfg["architectures"].empty()) {
    std::string cls = cfg["architectures"][0].get<std::string>();
    for (auto [name, arch] : kClasses)
      if (cls == name) return arch;
    return cls;
  }
  fail(dir, "/config.json: expected \"model_type\" or \"architectures\", found neither");
}

template <typename T>
T value_or(const json& obj, const char* key, T fallback) {
  if (!obj.is_object() || !obj.contains(key) || obj[key].is_null()) return fallback;
  return obj[key].get<T>();
}

int required(const json& cfg, const char* key, const std::string& dir) {
  if (!cfg.contains(key) || !cfg[key].is_number_integer())
    fail(dir, "/config.json: integer \"", key, "\" expected, found ",
         cfg.contains(key) ? cfg[key].dump() : "absent");
  return cfg[key].get<int>();
}

ModelConfig read_config(const json& cfg, const std::string& arch, const std::string& dir) {
  ModelConfig c;
  c.architecture = arch;
  c.vocab_size = required(cfg, "vocab_size", dir);
  c.hidden_size = required(cfg, "hidden_size", dir);
  c.intermediate_size = required(cfg, "intermediate_size", dir);
  c.n_layers = required(cfg, "num_hidden_layers", dir);
  c.n_heads = required(cfg, "num_attention_heads", dir);
  c.n_kv_heads = value_or<int>(cfg, "num_key_value_heads", c.n_heads);
  c.head_dim = value_or<int>(cfg, "head_dim", c.hidden_size / c.n_heads);
  c.rms_eps = value_or<float>(cfg, "rms_norm_eps", 1e-6f);
  c.max_context = value_or<int>(cfg, "max_position_embeddings", 0);
  c.tied_embeddings = value_or<bool>(cfg, "tie_word_embeddings", false);
  if (arch == "mistral") c.sliding_window = value_or<int>(cfg, "sliding_window", 0);
  if (arch == "qwen2" && value_or<bool>(cfg, "use_sliding_window", false)) {
    fail(dir, "/config.json: use_sliding_window true is not supported for qwen2 (expected false)");
  }

  c.rope.style = ops::RopeStyle::NeoX;
  json rope = cfg.contains("rope_parameters") ? cfg["rope_parameters"]
                                              : value_or<json>(cfg, "rope_scaling", json::object());
  c.rope.theta = value_or<float>(rope, "rope_theta", value_or<float>(cfg, "rope_theta", 10000.0f));
  std::string type = value_or<std::string>(rope, "rope_type", value_or<std::string>(rope, "type", "default"));
  if (type == "linear") {
    c.rope.scaling = {.kind = ops::RopeScalingKind::Linear, .factor = value_or<float>(rope, "factor", 1.0f)};
  } else if (type == "llama3") {
    c.rope.scaling = {.kind = ops::RopeScalingKind::Llama3,
                      .factor = value_or<float>(rope, "factor", 8.0f),
                      .low_freq_factor = value_or<float>(rope, "low_freq_factor", 1.0f),
                      .high_freq_factor = value_or<float>(rope, "high_freq_factor", 4.0f),
                      .original_context = value_or<int>(rope, "original_max_position_embeddings", 8192)};
  } else if (type != "default") {
    fail(dir, "/config.json: rope type '", type, "' is not supported (expected default, linear or llama3)");
  }
  return c;
}

std::string read_chat_template(const std::string& dir) {
  auto slurp = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  };
  fs::path jinja = fs::path(dir) / "chat_template.jinja";
  if (fs::exists(jinja)) return slurp(jinja);
  fs::path config = fs::path(dir) / "tokenizer_config.json";
  if (!fs::exists(config)) return "";
  json tc = json::parse(slurp(config), nullptr, /*allow_exceptions=*/false);
  if (!tc.is_object() || !tc.contains("chat_template")) return "";
  const json& t = tc["chat_template"];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_array()) {  // [{"name": "default", "template": "..."}, ...]
    for (const json& item : t)
      if (item.is_object() && value_or<std::string>(item, "name", "") == "default")
        return value_or<std::string>(item, "template", "");
  }
  return "";
}

}  // namespace

Checkpoint load_safetensors_checkpoint(const std::string& dir) {
  Checkpoint ck;
  ck.source = dir;
  ck.directory = dir;
  auto st = std::make_shared<formats::SafetensorsDir>(formats::SafetensorsDir::open(dir));
  const json& cfg = st->config();
  std::string arch = architecture_of(cfg, dir);
  if (!is_supported_architecture(arch)) fail_unsupported_architecture(arch, dir);
  ModelConfig& c = ck.config = read_config(cfg, arch, dir);
  ModelWeights& w = ck.weights;

  // A linear's weight: MLX affine blocks when quantized, else the stored tensor.
  auto matrix = [&](const std::string& prefix, int64_t rows, int64_t cols) {
    Tensor t = st->is_quantized(prefix) ? st->quantized_weight(prefix) : st->tensor(prefix + ".weight");
    check_shape(t, {rows, cols}, prefix + ".weight", dir);
    return t;
  };
  auto vector = [&](const std::string& name, int64_t n) {
    Tensor t = to_f32(st->tensor(name));
    check_shape(t, {n}, name, dir);
    return t;
  };
  auto optional_vector = [&](const std::string& name, int64_t n) {
    return st->has(name) ? vector(name, n) : Tensor();
  };

  const int64_t hidden = c.hidden_size, q_dim = c.q_dim(), kv_dim = c.kv_dim(),
                inter = c.intermediate_size, vocab = c.vocab_size;
  w.token_embd = matrix("model.embed_tokens", vocab, hidden);
  w.output_norm = vector("model.norm.weight", hidden);
  if (!st->has("lm_head.weight")) c.tied_embeddings = true;
  w.output = c.tied_embeddings ? w.token_embd : matrix("lm_head", vocab, hidden);

  for (int i = 0; i < c.n_layers; ++i) {
    std::string p = "model.layers." + std::to_string(i) + ".";
    LayerWeights l;
    l.attn_norm = vector(p + "input_layernorm.weight", hidden);
    l.wq = matrix(p + "self_attn.q_proj", q_dim, hidden);
    l.wk = matrix(p + "self_attn.k_proj", kv_dim, hidden);
    l.wv = matrix(p + "self_attn.v_proj", kv_dim, hidden);
    l.wo = matrix(p + "self_attn.o_proj", hidden, q_dim);
    l.bq = optional_vector(p + "self_attn.q_proj.bias", q_dim);
    l.bk = optional_vector(p + "self_attn.k_proj.bias", kv_dim);
    l.bv = optional_vector(p + "self_attn.v_proj.bias", kv_dim);
    l.bo = optional_vector(p + "self_attn.o_proj.bias", hidden);
    if (st->has(p + "self_attn.q_norm.weight")) {
      l.q_norm = vector(p + "self_attn.q_norm.weight", c.head_dim);
      l.k_norm = vector(p + "self_attn.k_norm.weight", c.head_dim);
    }
    l.ffn_norm = vector(p + "post_attention_layernorm.weight", hidden);
    l.w_gate = matrix(p + "mlp.gate_proj", inter, hidden);
    l.w_up = matrix(p + "mlp.up_proj", inter, hidden);
    l.w_down = matrix(p + "mlp.down_proj", hidden, inter);
    w.layers.push_back(std::move(l));
  }
  c.qkv_bias = !w.layers.empty() && w.layers[0].bq.defined();
  c.qk_norm = !w.layers.empty() && w.layers[0].q_norm.defined();
  if (arch == "qwen3" && !c.qk_norm) fail(dir, ": qwen3 expects self_attn.q_norm.weight, found absent");
  c.weight_dtype = dominant_dtype(w);
  ck.chat_template = read_chat_template(dir);
  return ck;
}

}  // namespace brioche::model
