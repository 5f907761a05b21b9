// Hugging Face safetensors directories: config.json -> ModelConfig, tensors
// `model.layers.N.*` -> LayerWeights (MLX affine-quantized linears repacked).
//
// Weights are in Hugging Face order, so RoPE is rotate-half (NeoX) for every
// architecture here. RoPE settings come from "rope_parameters" (transformers
// 5) or "rope_theta" + "rope_scaling" (older configs).
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_limits.h"
#include "formats/regular_file.h"
#include "formats/safetensors.h"
#include "model/config_fields.h"
#include "model/gemma4_config.h"
#include "model/weights.h"

namespace brioche::model {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string architecture_of(const ConfigFields& cfg) {
  static const std::pair<const char*, const char*> kClasses[] = {{"LlamaForCausalLM", "llama"},
                                                                 {"MistralForCausalLM", "mistral"},
                                                                 {"Qwen2ForCausalLM", "qwen2"},
                                                                 {"Qwen3ForCausalLM", "qwen3"}};
  if (cfg.has("model_type")) return cfg.string("model_type", "");
  const json* classes = cfg.find("architectures");
  if (classes != nullptr && classes->is_array() && !classes->empty()) {
    if (!(*classes)[0].is_string()) cfg.wrong("architectures", "an array of class names", *classes);
    std::string cls = (*classes)[0].get<std::string>();
    for (auto [name, arch] : kClasses)
      if (cls == name) return arch;
    return cls;
  }
  fail(cfg.source, ": expected \"model_type\" or \"architectures\", found neither");
}

// Every count goes through config_count and the finished config through
// validate_model_config (model_config.h) before any tensor is looked up.
ModelConfig read_config(const ConfigFields& cfg, const std::string& arch) {
  const std::string& source = cfg.source;
  ConfigKeyNames keys = ConfigKeyNames::hf_config();
  ModelConfig c;
  c.architecture = arch;
  c.vocab_size = cfg.count("vocab_size");
  c.hidden_size = cfg.count("hidden_size");
  c.intermediate_size = cfg.count("intermediate_size");
  c.n_layers = cfg.count("num_hidden_layers");
  c.n_heads = cfg.count("num_attention_heads");
  c.n_kv_heads = cfg.count("num_key_value_heads", c.n_heads);
  c.head_dim = cfg.has("head_dim") ? cfg.count("head_dim") : derived_head_dim(c.hidden_size, c.n_heads, keys, source);
  c.rms_eps = cfg.number("rms_norm_eps", 1e-6f);
  c.max_context = cfg.count("max_position_embeddings", 0);
  c.tied_embeddings = cfg.boolean("tie_word_embeddings", false);
  if (arch == "mistral") c.sliding_window = cfg.count("sliding_window", 0);
  if (arch == "qwen2" && cfg.boolean("use_sliding_window", false)) {
    fail(source, ": use_sliding_window true is not supported for qwen2 (expected false)");
  }

  c.rope.style = ops::RopeStyle::NeoX;
  const char* rope_key = cfg.has("rope_parameters") ? "rope_parameters" : "rope_scaling";
  const json* rope_obj = cfg.find(rope_key);
  if (rope_obj != nullptr && !rope_obj->is_object()) cfg.wrong(rope_key, "an object", *rope_obj);
  static const json kNoRope = json::object();
  const ConfigFields rope{
      .obj = rope_obj ? *rope_obj : kNoRope, .prefix = std::string(rope_key) + ".", .source = source};
  keys.rope_theta = rope.has("rope_theta") ? rope.prefix + "rope_theta" : "rope_theta";
  keys.rope_factor = rope.prefix + "factor";
  keys.rope_low_freq_factor = rope.prefix + "low_freq_factor";
  keys.rope_high_freq_factor = rope.prefix + "high_freq_factor";
  keys.rope_original_context = rope.prefix + "original_max_position_embeddings";
  c.rope.theta = rope.number("rope_theta", cfg.number("rope_theta", 10000.0f));
  std::string type = rope.string("rope_type", rope.string("type", "default"));
  if (type == "linear") {
    c.rope.scaling = {.kind = ops::RopeScalingKind::Linear, .factor = rope.number("factor", 1.0f)};
  } else if (type == "llama3") {
    c.rope.scaling = {.kind = ops::RopeScalingKind::Llama3,
                      .factor = rope.number("factor", 8.0f),
                      .low_freq_factor = rope.number("low_freq_factor", 1.0f),
                      .high_freq_factor = rope.number("high_freq_factor", 4.0f),
                      .original_context = rope.count("original_max_position_embeddings", 8192)};
  } else if (type != "default") {
    fail(source, ": rope type '", type, "' is not supported (expected default, linear or llama3)");
  }
  validate_model_config(c, keys, source);
  return c;
}

}  // namespace

// The chat template: chat_template.jinja, else tokenizer_config.json's
// "chat_template" (a string, or [{"name": "default", "template": "..."}]).
// Both are read as bounded regular files (a FIFO in their place must not hang
// the load); a malformed tokenizer_config.json means no template, as before.
std::string read_chat_template(const std::string& dir) {
  if (auto jinja = formats::read_regular_file_if_present((fs::path(dir) / "chat_template.jinja").string(),
                                                         formats::kMaxConfigJsonBytes)) {
    return *jinja;
  }
  auto config = formats::read_regular_file_if_present((fs::path(dir) / "tokenizer_config.json").string(),
                                                      formats::kMaxTokenizerJsonBytes);
  if (!config) return "";
  json tc = try_parse_json_bounded(*config);
  if (!tc.is_object() || !tc.contains("chat_template")) return "";
  const json& t = tc["chat_template"];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_array()) {
    for (const json& item : t) {
      if (!item.is_object()) continue;
      auto name = item.find("name"), text = item.find("template");
      if (name != item.end() && *name == "default" && text != item.end() && text->is_string())
        return text->get<std::string>();
    }
  }
  return "";
}

Checkpoint load_safetensors_checkpoint(const std::string& dir) {
  Checkpoint ck;
  ck.source = dir;
  ck.directory = dir;
  auto st = std::make_shared<formats::SafetensorsDir>(formats::SafetensorsDir::open(dir));
  const std::string config_path = (fs::path(dir) / "config.json").string();
  const ConfigFields cfg{.obj = st->config(), .prefix = "", .source = config_path};
  std::string arch = architecture_of(cfg);
  if (is_gemma4_config(st->config())) {
    // Gemma 4 is its own model (model/gemma4.h), loaded by Model::load only.
    fail(dir,
         ": Gemma 4 runs through Model::load (run, chat, serve, bench, info); training, scoring and export "
         "of Gemma 4 are not implemented yet");
  }
  if (!is_supported_architecture(arch)) fail_unsupported_architecture(arch, dir);
  ModelConfig& c = ck.config = read_config(cfg, arch);
  ModelWeights& w = ck.weights;

  // A linear's weight: MLX affine blocks when quantized, else the stored tensor.
  auto matrix = [&](const std::string& prefix, int64_t rows, int64_t cols) {
    Tensor t = st->linear_weight(prefix);
    check_shape(t, {rows, cols}, prefix + ".weight", dir);
    return t;
  };
  auto vector = [&](const std::string& name, int64_t n) {
    Tensor t = st->tensor(name);
    check_shape(t, {n}, name, dir);  // before the f32 copy, which a hostile size would make huge
    if (t.dtype() == DType::I32) fail(dir, ": tensor '", name, "' expected a float type, found i32 (or u32)");
    return to_f32(t);
  };
  auto optional_vector = [&](const std::string& name, int64_t n) { return st->has(name) ? vector(name, n) : Tensor(); };

  const int64_t hidden = c.hidden_size, q_dim = c.q_dim(), kv_dim = c.kv_dim(), inter = c.intermediate_size,
                vocab = c.vocab_size;
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
