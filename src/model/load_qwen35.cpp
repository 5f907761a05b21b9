// Qwen 3.5 safetensors directories: config.json -> ModelConfig + Qwen35Config,
// tensors -> Qwen35Checkpoint.
//
// Two layouts: a text model (Qwen3_5ForCausalLM / Qwen3_5MoeForCausalLM,
// model_type qwen3_5_text: settings at the top, tensors "model.layers.N.*")
// and the released multimodal checkpoints (Qwen3_5ForConditionalGeneration,
// model_type qwen3_5: settings under "text_config", tensors
// "model.language_model.layers.N.*"; the vision tower and the MTP head are
// not read). MoE experts are read per expert ("mlp.experts.E.gate_proj.weight",
// as transformers saves them) or stacked ("mlp.experts.gate_up_proj" [E, 2I, H]
// and "mlp.experts.down_proj" [E, H, I], transformers' in-memory layout).
//
// MLX directories (mlx-lm conversions, quantized or not): tensors
// "language_model.model.*" and "language_model.lm_head", experts stacked per
// projection ("mlp.switch_mlp.{gate,up,down}_proj" [E, I, H] / [E, H, I]),
// the conv as [C, K, 1] (transformers: [C, 1, K]) and, as mlx-lm's sanitize
// writes them whenever it moves the conv, the zero-centred norms stored as
// 1 + w. The conv's shape tells the two apart, as it does for mlx-lm.
// Quantized linears, with per-module bits, go through
// SafetensorsDir::linear_weight.
#include <cmath>
#include <filesystem>
#include <limits>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/finite.h"
#include "core/json_limits.h"
#include "formats/regular_file.h"
#include "formats/safetensors.h"
#include "model/config_fields.h"
#include "model/load_qwen35_gguf.h"
#include "model/qwen35_config.h"
#include "model/qwen35_weights.h"
#include "model/weights.h"
#include "ops/rope.h"

namespace brioche::model {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

bool is_qwen35_name(const std::string& s) {
  return s == "qwen3_5" || s == "qwen3_5_text" || s == "qwen3_5_moe" || s == "qwen3_5_moe_text" ||
         s == "Qwen3_5ForCausalLM" || s == "Qwen3_5ForConditionalGeneration" || s == "Qwen3_5MoeForCausalLM" ||
         s == "Qwen3_5MoeForConditionalGeneration";
}

// "[128, 1, 4]", as check_shape writes shapes.
std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

}  // namespace

void read_qwen35_config(const ConfigFields& cfg, bool moe, ModelConfig& c, Qwen35Config& q) {
  const std::string& source = cfg.source;
  ConfigKeyNames keys = ConfigKeyNames::hf_config();
  for (std::string* k : {&keys.vocab_size, &keys.hidden_size, &keys.intermediate_size, &keys.n_layers, &keys.n_heads,
                         &keys.n_kv_heads, &keys.head_dim, &keys.rms_eps, &keys.max_context})
    *k = cfg.prefix + *k;
  c.architecture = moe ? "qwen3_5_moe" : "qwen3_5";
  // Absent keys take transformers 5.25's Qwen3_5TextConfig defaults (head_dim
  // 256 and 4 kv heads, not hidden / heads), so a file reads as transformers reads it.
  c.vocab_size = cfg.count("vocab_size", 1, std::numeric_limits<int>::max());
  c.hidden_size = cfg.count("hidden_size", 1, kMaxHiddenSize);
  c.n_layers = cfg.count("num_hidden_layers", 1, kMaxLayers);
  c.n_heads = cfg.count("num_attention_heads", 1, kMaxHeads);
  c.n_kv_heads = cfg.count("num_key_value_heads", 1, c.n_heads, 4);
  c.head_dim = cfg.count("head_dim", 2, kMaxHeadDim, 256);
  c.rms_eps = cfg.number("rms_norm_eps", 1e-6f);
  c.max_context = cfg.count("max_position_embeddings", 0, kMaxContext, 0);
  c.tied_embeddings = cfg.boolean("tie_word_embeddings", false);
  if (moe) {
    q.n_experts = cfg.count("num_experts", 1, 4096);
    q.experts_per_token = cfg.count("num_experts_per_tok", 1, q.n_experts);
    q.expert_intermediate = cfg.count("moe_intermediate_size", 1, kMaxIntermediateSize);
    q.shared_expert_intermediate = cfg.count("shared_expert_intermediate_size", 0, kMaxIntermediateSize);
    c.intermediate_size = q.expert_intermediate;
  } else {
    c.intermediate_size = cfg.count("intermediate_size", 1, kMaxIntermediateSize);
  }
  if (cfg.boolean("attention_bias", false))
    fail(source, ": ", cfg.prefix, "attention_bias: expected false, found true");
  const std::string act = cfg.string("hidden_act", "silu");
  if (act != "silu") fail(source, ": ", cfg.prefix, "hidden_act: expected \"silu\", found \"", act, "\"");

  // RoPE: rope_parameters (transformers 5) or rope_theta + partial_rotary_factor at the top.
  const json* rope_obj = cfg.find("rope_parameters");
  if (rope_obj == nullptr) rope_obj = cfg.find("rope_scaling");
  if (rope_obj != nullptr && !rope_obj->is_object()) cfg.wrong("rope_parameters", "an object", *rope_obj);
  static const json kNone = json::object();
  const ConfigFields rope{
      .obj = rope_obj ? *rope_obj : kNone, .prefix = cfg.prefix + "rope_parameters.", .source = source};
  // A scaling key (factor, beta_fast, ...) would change the angles: refused,
  // not ignored. The M-RoPE sections are plain RoPE for text (one position a
  // token on every axis).
  rope.only({"rope_type", "type", "rope_theta", "partial_rotary_factor", "mrope_section", "mrope_interleaved"});
  keys.rope_theta = rope.has("rope_theta") ? rope.prefix + "rope_theta" : cfg.prefix + "rope_theta";
  c.rope.theta = rope.number("rope_theta", cfg.number("rope_theta", 10000.0f));
  c.rope.style = ops::RopeStyle::NeoX;
  const std::string type = rope.string("rope_type", rope.string("type", "default"));
  if (type != "default") fail(source, ": ", rope.prefix, "rope_type: expected \"default\", found \"", type, "\"");
  const float partial = rope.number("partial_rotary_factor", cfg.number("partial_rotary_factor", 0.25f));
  if (!(partial > 0.0f && partial <= 1.0f))
    fail(source, ": ", rope.prefix, "partial_rotary_factor: expected a number in (0, 1], found ", partial);
  validate_model_config(c, keys, source);
  q.rotary_dim = int(float(c.head_dim) * partial);
  if (q.rotary_dim < 2 || q.rotary_dim % 2 != 0)
    fail(source, ": ", rope.prefix, "partial_rotary_factor: ", partial, " x head_dim ", c.head_dim, " gives ",
         q.rotary_dim, " rotary dims, expected an even number >= 2");

  // Linear-attention layers.
  q.linear_k_heads = cfg.count("linear_num_key_heads", 1, kMaxHeads);
  q.linear_v_heads = cfg.count("linear_num_value_heads", 1, kMaxHeads);
  if (q.linear_v_heads % q.linear_k_heads != 0)
    fail(source, ": ", cfg.prefix, "linear_num_value_heads: expected a multiple of linear_num_key_heads ",
         q.linear_k_heads, ", found ", q.linear_v_heads);
  q.linear_key_dim = cfg.count("linear_key_head_dim", 1, kMaxHeadDim);
  q.linear_value_dim = cfg.count("linear_value_head_dim", 1, kMaxHeadDim);
  q.conv_kernel = cfg.count("linear_conv_kernel_dim", 2, 64, 4);

  q.linear_layers.assign(size_t(c.n_layers), 0);
  const json* types = cfg.find("layer_types");
  if (types != nullptr) {
    if (!types->is_array() || int(types->size()) != c.n_layers)
      cfg.wrong("layer_types", ("an array of " + std::to_string(c.n_layers) + " layer types").c_str(), *types);
    for (int l = 0; l < c.n_layers; ++l) {
      const json& t = (*types)[size_t(l)];
      if (t == "linear_attention")
        q.linear_layers[size_t(l)] = 1;
      else if (t != "full_attention")
        fail(source, ": ", cfg.prefix, "layer_types[", l,
             "]: expected \"linear_attention\" or \"full_attention\", found ", t.dump().substr(0, 40));
    }
  } else {
    // transformers' default: every full_attention_interval-th layer is full attention.
    const int interval = cfg.count("full_attention_interval", 1, kMaxLayers, 4);
    for (int l = 0; l < c.n_layers; ++l) q.linear_layers[size_t(l)] = (l + 1) % interval != 0;
  }
  for (int l = 0; l < c.n_layers; ++l) {
    if (q.linear_layers[size_t(l)]) {
      c.kv_layers.push_back({.n_kv_heads = 0, .head_dim = 0});
      c.state_layers.push_back({.conv_channels = q.conv_channels(),
                                .conv_kernel = q.conv_kernel,
                                .n_heads = q.linear_v_heads,
                                .key_dim = q.linear_key_dim,
                                .value_dim = q.linear_value_dim});
    } else {
      c.kv_layers.push_back({.n_kv_heads = c.n_kv_heads, .head_dim = c.head_dim});
      c.state_layers.push_back({});
    }
  }
}

bool is_qwen35_directory(const std::string& dir) {
  auto text =
      formats::read_regular_file_if_present((fs::path(dir) / "config.json").string(), formats::kMaxConfigJsonBytes);
  if (!text) return false;
  const json cfg = try_parse_json_bounded(*text);
  if (!cfg.is_object()) return false;
  if (auto it = cfg.find("model_type"); it != cfg.end() && it->is_string()) return is_qwen35_name(*it);
  if (auto it = cfg.find("architectures"); it != cfg.end() && it->is_array() && !it->empty() && (*it)[0].is_string())
    return is_qwen35_name((*it)[0]);
  return false;
}

Qwen35Checkpoint load_qwen35_checkpoint(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return load_qwen35_gguf_checkpoint(dir);  // a llama.cpp file
  auto st = std::make_shared<formats::SafetensorsDir>(formats::SafetensorsDir::open(dir));
  const std::string config_path = (fs::path(dir) / "config.json").string();
  const json& top = st->config();
  std::string type =
      top.contains("model_type") && top["model_type"].is_string() ? top["model_type"].get<std::string>() : "";
  if (type.empty() && top.contains("architectures") && top["architectures"].is_array() &&
      !top["architectures"].empty() && top["architectures"][0].is_string())
    type = top["architectures"][0].get<std::string>();
  const bool moe = type.find("moe") != std::string::npos || type.find("Moe") != std::string::npos;
  // The multimodal layout keeps the text model's settings in text_config.
  const ConfigFields top_fields{.obj = top, .prefix = "", .source = config_path};
  const bool nested = top_fields.has("text_config");
  if (nested && !top["text_config"].is_object()) top_fields.wrong("text_config", "an object", top["text_config"]);
  const ConfigFields cfg{
      .obj = nested ? top["text_config"] : top, .prefix = nested ? "text_config." : "", .source = config_path};
  Qwen35Checkpoint ck;
  ck.directory = dir;
  ck.multimodal = nested;
  read_qwen35_config(cfg, moe, ck.config, ck.qwen);
  if (nested && !cfg.has("tie_word_embeddings"))
    ck.config.tied_embeddings =
        ConfigFields{.obj = top, .prefix = "", .source = config_path}.boolean("tie_word_embeddings", false);
  const ModelConfig& c = ck.config;
  const Qwen35Config& q = ck.qwen;
  const bool mlx_names = st->has("language_model.model.embed_tokens.weight");
  const std::string root = mlx_names ? "language_model.model." : nested ? "model.language_model." : "model.";
  const std::string head = mlx_names ? "language_model.lm_head" : "lm_head";

  // Every weight is float or MLX-quantized; an i32 one (a mislabelled dtype)
  // would fail only in the first forward, without its name.
  auto not_index = [&](const Tensor& t, const std::string& name) {
    if (t.dtype() == DType::I32) fail(dir, ": tensor '", name, "' expected a float type, found i32 (or u32)");
    return t;
  };
  auto matrix = [&](const std::string& prefix, int64_t rows, int64_t cols) {
    Tensor t = st->linear_weight(prefix);
    check_shape(t, {rows, cols}, prefix + ".weight", dir);
    return not_index(t, prefix + ".weight");
  };
  auto stacked = [&](const std::string& prefix, std::initializer_list<int64_t> shape) {
    Tensor t = st->linear_weight(prefix);
    check_shape(t, shape, prefix + ".weight", dir);
    return not_index(t, prefix + ".weight");
  };
  // MLX's layout (conv [C, K, 1], norms as 1 + w) or transformers' ([C, 1, K], w).
  bool mlx_layout = false;
  for (int l = 0; l < c.n_layers; ++l) {
    if (!q.linear_layers[size_t(l)]) continue;
    const std::string name = root + "layers." + std::to_string(l) + ".linear_attn.conv1d.weight";
    const formats::SafetensorsTensorInfo* conv = st->file_of(name).find(name);
    const std::vector<int64_t> mlx_shape{q.conv_channels(), q.conv_kernel, 1};
    const std::vector<int64_t> hf_shape{q.conv_channels(), 1, q.conv_kernel};
    if (conv->shape != mlx_shape && conv->shape != hf_shape)
      fail(dir, ": tensor '", name, "' expected shape ", shape_text(hf_shape), " (transformers) or ",
           shape_text(mlx_shape), " (MLX), found ", shape_text(conv->shape));
    mlx_layout = conv->shape == mlx_shape;
    break;
  }
  auto vector = [&](const std::string& name, int64_t n) {
    Tensor t = st->tensor(name);
    check_shape(t, {n}, name, dir);
    return to_f32(not_index(t, name));
  };
  // The decay's per-head parameters: exp(A_log) and softplus(a + dt_bias) of
  // a non-finite value poison every later state of the sequence.
  auto finite_vector = [&](const std::string& name, int64_t n) {
    Tensor t = vector(name, n);
    const std::span<const float> v(t.data_as<float>(), size_t(n));
    if (const auto i = first_non_finite(v))
      fail(dir, ": tensor '", name, "' [", *i, "]: expected a finite number, found ", v[size_t(*i)]);
    return t;
  };
  // transformers' zero-centred RMSNorm multiplies by 1 + w: stored as such
  // (an MLX file holds 1 + w already).
  auto centred_norm = [&](const std::string& name, int64_t n) {
    Tensor w = vector(name, n);
    if (mlx_layout) return w;
    Tensor out = Tensor::zeros(DType::F32, {n});
    for (int64_t i = 0; i < n; ++i) out.data_as<float>()[i] = 1.0f + w.data_as<float>()[i];
    return out;
  };

  const int64_t hidden = c.hidden_size, vocab = c.vocab_size;
  ck.token_embd = matrix(root + "embed_tokens", vocab, hidden);
  ck.output_norm = centred_norm(root + "norm.weight", hidden);
  if (!st->has(head + ".weight")) ck.config.tied_embeddings = true;
  ck.output = c.tied_embeddings ? ck.token_embd : matrix(head, vocab, hidden);

  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = root + "layers." + std::to_string(l) + ".";
    Qwen35Layer layer;
    layer.input_norm = centred_norm(p + "input_layernorm.weight", hidden);
    layer.post_norm = centred_norm(p + "post_attention_layernorm.weight", hidden);
    if (q.linear_layers[size_t(l)]) {
      const std::string a = p + "linear_attn.";
      Qwen35LinearAttention& la = layer.linear;
      la.in_qkv = matrix(a + "in_proj_qkv", q.conv_channels(), hidden);
      la.in_z = matrix(a + "in_proj_z", q.value_width(), hidden);
      la.in_b = matrix(a + "in_proj_b", q.linear_v_heads, hidden);
      la.in_a = matrix(a + "in_proj_a", q.linear_v_heads, hidden);
      Tensor conv = st->tensor(a + "conv1d.weight");
      if (mlx_layout)
        check_shape(conv, {q.conv_channels(), q.conv_kernel, 1}, a + "conv1d.weight", dir);
      else
        check_shape(conv, {q.conv_channels(), 1, q.conv_kernel}, a + "conv1d.weight", dir);
      la.conv = to_f32(not_index(conv, a + "conv1d.weight").reshape({q.conv_channels(), q.conv_kernel}));
      la.a_log = finite_vector(a + "A_log", q.linear_v_heads);
      la.dt_bias = finite_vector(a + "dt_bias", q.linear_v_heads);
      la.norm = vector(a + "norm.weight", q.linear_value_dim);
      la.out = matrix(a + "out_proj", hidden, q.value_width());
    } else {
      const std::string a = p + "self_attn.";
      Qwen35FullAttention& fa = layer.full;
      fa.wq = matrix(a + "q_proj", int64_t(c.q_dim()) * 2, hidden);
      fa.wk = matrix(a + "k_proj", c.kv_dim(), hidden);
      fa.wv = matrix(a + "v_proj", c.kv_dim(), hidden);
      fa.wo = matrix(a + "o_proj", hidden, c.q_dim());
      fa.q_norm = centred_norm(a + "q_norm.weight", c.head_dim);
      fa.k_norm = centred_norm(a + "k_norm.weight", c.head_dim);
    }
    if (q.n_experts == 0) {
      layer.mlp = {.gate = matrix(p + "mlp.gate_proj", c.intermediate_size, hidden),
                   .up = matrix(p + "mlp.up_proj", c.intermediate_size, hidden),
                   .down = matrix(p + "mlp.down_proj", hidden, c.intermediate_size)};
    } else {
      const std::string m = p + "mlp.";
      const int64_t inter = q.expert_intermediate;
      layer.router = matrix(m + "gate", q.n_experts, hidden);
      if (st->has(m + "switch_mlp.gate_proj.weight")) {  // MLX: stacked per projection, each maybe quantized
        Tensor gate = stacked(m + "switch_mlp.gate_proj", {q.n_experts, inter, hidden});
        Tensor up = stacked(m + "switch_mlp.up_proj", {q.n_experts, inter, hidden});
        Tensor down = stacked(m + "switch_mlp.down_proj", {q.n_experts, hidden, inter});
        for (int e = 0; e < q.n_experts; ++e)
          layer.experts.push_back({.gate = gate.select(e), .up = up.select(e), .down = down.select(e)});
      } else if (st->has(m + "experts.gate_up_proj")) {
        Tensor gate_up = st->tensor(m + "experts.gate_up_proj");
        Tensor down = st->tensor(m + "experts.down_proj");
        check_shape(gate_up, {q.n_experts, 2 * inter, hidden}, m + "experts.gate_up_proj", dir);
        check_shape(down, {q.n_experts, hidden, inter}, m + "experts.down_proj", dir);
        not_index(gate_up, m + "experts.gate_up_proj");
        not_index(down, m + "experts.down_proj");
        for (int e = 0; e < q.n_experts; ++e) {
          Tensor gu = gate_up.select(e);
          layer.experts.push_back(
              {.gate = gu.slice(0, 0, inter), .up = gu.slice(0, inter, 2 * inter), .down = down.select(e)});
        }
      } else {
        for (int e = 0; e < q.n_experts; ++e) {
          const std::string x = m + "experts." + std::to_string(e) + ".";
          layer.experts.push_back({.gate = matrix(x + "gate_proj", inter, hidden),
                                   .up = matrix(x + "up_proj", inter, hidden),
                                   .down = matrix(x + "down_proj", hidden, inter)});
        }
      }
      if (q.shared_expert_intermediate > 0) {
        const int64_t si = q.shared_expert_intermediate;
        layer.shared_expert = {.gate = matrix(m + "shared_expert.gate_proj", si, hidden),
                               .up = matrix(m + "shared_expert.up_proj", si, hidden),
                               .down = matrix(m + "shared_expert.down_proj", hidden, si)};
        layer.shared_expert_gate = matrix(m + "shared_expert_gate", 1, hidden);
      } else if (st->has(m + "shared_expert_gate.weight") || st->has(m + "shared_expert.gate_proj.weight") ||
                 st->has(m + "shared_expert.gate_proj.scales")) {
        // Size 0 means no shared expert: one in the file would be dropped silently.
        fail(config_path, ": ", cfg.prefix, "shared_expert_intermediate_size: expected the width of ", m,
             "shared_expert.* (present in ", dir, "), found 0");
      }
    }
    ck.layers.push_back(std::move(layer));
  }
  ck.config.weight_dtype = ck.token_embd.dtype();
  ck.chat_template = read_chat_template(dir);
  return ck;
}

}  // namespace brioche::model
