// A Gemma 4 Hugging Face or MLX directory -> Gemma4Checkpoint. Every tensor
// the config implies is looked up and shape-checked (errors name the tensor
// and the directory); tensors of the vision and audio towers of a multimodal
// checkpoint are not read.
//
// MLX directories (mlx-lm conversions, quantized or not) differ
// from transformers' in three ways: a multimodal model's text weights are
// "language_model.model.*" (transformers: "model.language_model.*") and its
// head "language_model.lm_head"; the experts are stacked per projection,
// "experts.switch_glu.{gate,up,down}_proj" [E, I, H] / [E, H, I]
// (transformers: gate_up_proj [E, 2I, H]); KV-shared layers have no k/v
// projections (transformers keeps unused ones). Quantized linears, with
// per-module bits, go through SafetensorsDir::linear_weight.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/finite.h"
#include "core/json_limits.h"
#include "formats/regular_file.h"
#include "formats/safetensors.h"
#include "model/gemma4_weights.h"
#include "model/load_gemma4_gguf.h"
#include "model/weights.h"
#include "ops/device.h"
#include "ops/quantize.h"

namespace brioche::model {

namespace fs = std::filesystem;

namespace {

// MLX's stacked gate [E, I, H] and up [E, I, H] -> [E, 2I, H], each expert's
// gate rows then its up rows (the layout Gemma4Model reads). Rows of any
// dtype are whole blocks, so a byte copy per expert; a mixed-precision file
// may quantize the two differently, which then meet as f32.
Tensor stack_gate_up(Tensor gate, Tensor up) {
  if (gate.dtype() != up.dtype()) {
    gate = ops::convert(gate, DType::F32);
    up = ops::convert(up, DType::F32);
  }
  const int64_t experts = gate.dim(0);
  Tensor out = Tensor::zeros(gate.dtype(), {experts, 2 * gate.dim(1), gate.dim(2)});
  const size_t half = gate.nbytes() / size_t(experts);  // one expert's rows of one projection
  auto* dst = static_cast<uint8_t*>(out.data());
  const auto* g = static_cast<const uint8_t*>(gate.data());
  const auto* u = static_cast<const uint8_t*>(up.data());
  for (int64_t e = 0; e < experts; ++e) {
    std::memcpy(dst + size_t(e) * 2 * half, g + size_t(e) * half, half);
    std::memcpy(dst + size_t(e) * 2 * half + half, u + size_t(e) * half, half);
  }
  return out;
}

}  // namespace

bool is_gemma4_directory(const std::string& dir) {
  auto text =
      formats::read_regular_file_if_present((fs::path(dir) / "config.json").string(), formats::kMaxConfigJsonBytes);
  if (!text) return false;
  return is_gemma4_config(try_parse_json_bounded(*text));
}

Gemma4Checkpoint load_gemma4_checkpoint(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return load_gemma4_gguf_checkpoint(dir);  // a llama.cpp file
  auto st = std::make_shared<formats::SafetensorsDir>(formats::SafetensorsDir::open(dir));
  Gemma4Checkpoint ck;
  ck.directory = dir;
  ck.files = st;
  ck.config = read_gemma4_config(st->config(), (fs::path(dir) / "config.json").string());
  const Gemma4Config& g = ck.config;
  const ModelConfig& c = g.base;
  Gemma4Weights& w = ck.weights;
  // An MLX multimodal conversion names the text model "language_model.model.".
  const bool mlx_nested = st->has("language_model.model.embed_tokens.weight");
  const std::string pre = mlx_nested ? "language_model.model." : g.tensor_prefix;
  const std::string head = mlx_nested ? "language_model.lm_head" : "lm_head";

  // A matrix is float or MLX-quantized; an i32 one (a mislabelled dtype) would
  // fail only in the first forward's matmul, without its name.
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
  auto float_tensor = [&](const std::string& name, std::initializer_list<int64_t> shape) {
    Tensor t = st->tensor(name);
    check_shape(t, shape, name, dir);  // before any copy, which a hostile size would make huge
    return not_index(t, name);
  };
  auto vector = [&](const std::string& name, int64_t n) { return to_f32(float_tensor(name, {n})); };
  auto host_floats = [&](const std::string& name, int64_t n) {
    Tensor t = vector(name, n);
    const float* p = t.data_as<float>();
    std::vector<float> v(p, p + n);
    if (const auto i = first_non_finite(v))
      fail(dir, ": tensor '", name, "' [", *i, "]: expected a finite number, found ", v[size_t(*i)]);
    return v;
  };

  const int64_t hidden = c.hidden_size, vocab = c.vocab_size;
  w.token_embd = matrix(pre + "embed_tokens", vocab, hidden);
  w.output_norm = vector(pre + "norm.weight", hidden);
  const bool has_head = st->has(head + ".weight");
  w.output = has_head ? matrix(head, vocab, hidden) : w.token_embd;
  ck.config.base.tied_embeddings = !has_head;

  const int64_t P = g.ple_dim, L = c.n_layers;
  if (P > 0) {
    w.ple_embd = matrix(pre + "embed_tokens_per_layer", g.ple_vocab, L * P);
    w.ple_model_proj = matrix(pre + "per_layer_model_projection", L * P, hidden);
    w.ple_proj_norm = vector(pre + "per_layer_projection_norm.weight", P);
  }

  for (int i = 0; i < c.n_layers; ++i) {
    const Gemma4LayerSpec& spec = g.layers[size_t(i)];
    const std::string p = pre + "layers." + std::to_string(i) + ".";
    const int64_t hd = spec.head_dim, q_dim = int64_t(c.n_heads) * hd, kv_dim = int64_t(spec.n_kv_heads) * hd;
    Gemma4LayerWeights l;
    l.attn_norm = vector(p + "input_layernorm.weight", hidden);
    l.wq = matrix(p + "self_attn.q_proj", q_dim, hidden);
    l.q_norm = vector(p + "self_attn.q_norm.weight", hd);
    if (!g.kv_shared(i)) {
      l.wk = matrix(p + "self_attn.k_proj", kv_dim, hidden);
      if (!spec.v_from_k) l.wv = matrix(p + "self_attn.v_proj", kv_dim, hidden);
      l.k_norm = vector(p + "self_attn.k_norm.weight", hd);
      l.v_norm = ops::zeros(DType::F32, {hd}, Device::CPU);
      std::fill_n(l.v_norm.data_as<float>(), hd, 1.0f);
    }
    l.wo = matrix(p + "self_attn.o_proj", hidden, q_dim);
    if (g.attention_bias) {  // nn.Linear(..., bias=attention_bias) on q, k, v and o
      l.bq = vector(p + "self_attn.q_proj.bias", q_dim);
      if (l.wk.defined()) l.bk = vector(p + "self_attn.k_proj.bias", kv_dim);
      if (l.wv.defined()) l.bv = vector(p + "self_attn.v_proj.bias", kv_dim);
      l.bo = vector(p + "self_attn.o_proj.bias", hidden);
    }
    l.post_attn_norm = vector(p + "post_attention_layernorm.weight", hidden);
    l.pre_ffn_norm = vector(p + "pre_feedforward_layernorm.weight", hidden);
    l.post_ffn_norm = vector(p + "post_feedforward_layernorm.weight", hidden);
    const int64_t inter = spec.intermediate_size;
    l.w_gate = matrix(p + "mlp.gate_proj", inter, hidden);
    l.w_up = matrix(p + "mlp.up_proj", inter, hidden);
    l.w_down = matrix(p + "mlp.down_proj", hidden, inter);
    // A persistent buffer in transformers; a checkpoint without it has 1.
    if (st->has(p + "layer_scalar")) l.layer_scalar = host_floats(p + "layer_scalar", 1)[0];
    if (P > 0) {
      l.ple_gate = matrix(p + "per_layer_input_gate", P, hidden);
      l.ple_proj = matrix(p + "per_layer_projection", hidden, P);
      l.ple_post_norm = vector(p + "post_per_layer_input_norm.weight", hidden);
    }
    if (g.moe) {
      const int64_t E = g.n_experts, I = g.moe_intermediate_size;
      l.router_proj = matrix(p + "router.proj", E, hidden);
      // The router's norm has no scale; its input is then multiplied by
      // scale · hidden^−½: one weight vector for ops::rms_norm (a copy: the
      // stored tensor is a read-only view of the file).
      const std::vector<float> scale = host_floats(p + "router.scale", hidden);
      l.router_norm = ops::zeros(DType::F32, {hidden}, Device::CPU);
      const float root = float(1.0 / std::sqrt(double(hidden)));
      for (int64_t j = 0; j < hidden; ++j) l.router_norm.data_as<float>()[j] = scale[size_t(j)] * root;
      l.expert_scale = host_floats(p + "router.per_expert_scale", E);
      if (st->has(p + "experts.switch_glu.gate_proj.weight")) {  // MLX: stacked per projection
        const std::string x = p + "experts.switch_glu.";
        l.experts_gate_up =
            stack_gate_up(stacked(x + "gate_proj", {E, I, hidden}), stacked(x + "up_proj", {E, I, hidden}));
        l.experts_down = stacked(x + "down_proj", {E, hidden, I});
      } else {
        l.experts_gate_up = float_tensor(p + "experts.gate_up_proj", {E, 2 * I, hidden});
        l.experts_down = float_tensor(p + "experts.down_proj", {E, hidden, I});
      }
      l.post_ffn_norm_1 = vector(p + "post_feedforward_layernorm_1.weight", hidden);
      l.pre_ffn_norm_2 = vector(p + "pre_feedforward_layernorm_2.weight", hidden);
      l.post_ffn_norm_2 = vector(p + "post_feedforward_layernorm_2.weight", hidden);
    }
    w.layers.push_back(std::move(l));
  }
  ck.config.base.weight_dtype = w.token_embd.dtype();
  ck.chat_template = read_chat_template(dir);
  return ck;
}

}  // namespace brioche::model
