// Gemma 4 GGUF files (llama.cpp's "gemma4" architecture, as its
// convert_hf_to_gguf.py, Gemma4Model, writes them) -> Gemma4Checkpoint.
//
// The metadata becomes the config.json that read_gemma4_config reads (its
// checks and errors then apply; a missing GGUF key is named as such):
//
//   GGUF (gemma4.)                         config.json (text model)
//   embedding_length, block_count          hidden_size, num_hidden_layers
//   attention.head_count                   num_attention_heads
//   attention.head_count_kv (per layer)    per_layer_config.N.num_key_value_heads
//   attention.key_length[_swa]             per_layer_config.N.head_dim (full / sliding)
//   attention.sliding_window[_pattern]     sliding_window, layer_types
//   attention.shared_kv_layers             num_kv_shared_layers
//   feed_forward_length (per layer)        intermediate_size, use_double_wide_mlp
//   embedding_length_per_layer_input       hidden_size_per_layer_input
//   rope.freq_base[_swa]                   rope_parameters.{full,sliding}_attention.rope_theta
//   rope_freqs.weight                      the full layers' proportional RoPE: factor 1 on the
//                                          rotated pairs, 1e30 (no rotation) on the rest
//   final_logit_softcapping, attention.layer_norm_rms_epsilon, context_length
//   expert_count, expert_used_count, expert_feed_forward_length   the MoE block
//
// Tensors are renamed only (Gemma 4's norms hold their scale as is):
//   token_embd, output, output_norm, per_layer_token_embd, per_layer_model_proj,
//   per_layer_proj_norm; blk.N.{attn_norm, attn_q, attn_k, attn_v (absent with
//   attention_k_eq_v on full layers and on KV-shared layers), attn_output,
//   attn_q_norm, attn_k_norm, post_attention_norm, ffn_norm (pre-feedforward),
//   ffn_gate, ffn_up, ffn_down, post_ffw_norm, layer_output_scale (layer_scalar),
//   inp_gate, proj, post_norm (the per-layer input's gate, projection, norm)};
//   the MoE block: ffn_gate_inp (router.proj), ffn_gate_inp.scale (router.scale),
//   ffn_gate_up_exps [E, 2I, H], ffn_down_exps [E, H, I], ffn_down_exps.scale
//   (router.per_expert_scale), post_ffw_norm_1, pre_ffw_norm_2, post_ffw_norm_2.
#include <cmath>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/finite.h"
#include "formats/gguf.h"
#include "model/gemma4_weights.h"
#include "model/load_gemma4_gguf.h"
#include "model/weights.h"
#include "ops/device.h"

namespace brioche::model {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kArch = "gemma4";

json config_from_metadata(const formats::GgufFile& f) {
  const std::string& path = f.path();
  auto key = [](const char* suffix) { return std::string(kArch) + "." + suffix; };
  auto required = [&](const char* suffix) -> const formats::GgufValue& {
    const formats::GgufValue* v = f.find(key(suffix));
    if (v == nullptr) fail(path, ": metadata '", key(suffix), "' expected, found absent");
    return *v;
  };
  const int64_t layers = required("block_count").as_int();
  if (layers < 1 || layers > kMaxLayers)
    fail(path, ": ", key("block_count"), ": expected 1..", kMaxLayers, ", found ", layers);
  // A per-layer value: an array of block_count entries, or one for all.
  auto per_layer = [&](const char* suffix) {
    const formats::GgufValue& v = required(suffix);
    std::vector<int64_t> out;
    if (v.is_array()) {
      out = v.as_ints();
      if (int64_t(out.size()) != layers)
        fail(path, ": ", key(suffix), ": expected ", layers, " entries (one per layer), found ", out.size());
    } else {
      out.assign(size_t(layers), v.as_int());
    }
    return out;
  };

  json c;
  c["model_type"] = "gemma4_text";
  const formats::GgufTensorInfo* embedding = f.find_tensor("token_embd.weight");
  if (embedding == nullptr) fail(path, ": tensor 'token_embd.weight' expected, found absent");
  if (embedding->shape.size() != 2)
    fail(path, ": tensor 'token_embd.weight' expected rank 2 [vocab, hidden], found rank ", embedding->shape.size());
  c["vocab_size"] = embedding->shape[0];
  c["hidden_size"] = required("embedding_length").as_int();
  c["num_hidden_layers"] = layers;
  c["num_attention_heads"] = required("attention.head_count").as_int();
  c["rms_norm_eps"] = f.get_float(key("attention.layer_norm_rms_epsilon"), 1e-6);
  c["max_position_embeddings"] = f.get_int(key("context_length"), 131072);
  c["sliding_window"] = required("attention.sliding_window").as_int();
  c["tie_word_embeddings"] = f.find_tensor("output.weight") == nullptr;
  if (const formats::GgufValue* cap = f.find(key("final_logit_softcapping")))
    c["final_logit_softcapping"] = cap->as_float();

  // Layer kinds, then each layer's attention shape.
  const formats::GgufValue& pattern = required("attention.sliding_window_pattern");
  if (!pattern.is_array() || int64_t(pattern.array_size()) != layers)
    fail(path, ": ", key("attention.sliding_window_pattern"), ": expected ", layers, " booleans, found ",
         pattern.describe());
  std::vector<bool> sliding(static_cast<size_t>(layers));
  json types = json::array();
  for (int64_t l = 0; l < layers; ++l) {
    sliding[size_t(l)] = pattern.at(size_t(l)).as_bool();
    types.push_back(sliding[size_t(l)] ? "sliding_attention" : "full_attention");
  }
  c["layer_types"] = types;
  const int64_t head_full = required("attention.key_length").as_int();
  const int64_t head_swa = f.get_int(key("attention.key_length_swa"), head_full);
  for (const auto& [k, want] :
       {std::pair{"attention.value_length", head_full}, {"attention.value_length_swa", head_swa}})
    if (const int64_t v = f.get_int(key(k), want); v != want)
      fail(path, ": ", key(k), ": expected ", want, " (= the key length), found ", v);
  // llama.cpp rotates rope.dimension_count[_swa] dims of a head; here every
  // pair is rotated (the full layers' partial rotation is rope_freqs.weight's).
  for (const auto& [k, want] : {std::pair{"rope.dimension_count", head_full}, {"rope.dimension_count_swa", head_swa}})
    if (const int64_t v = f.get_int(key(k), want); v != want)
      fail(path, ": ", key(k), ": expected ", want,
           " (= the key length; rope_freqs.weight gives partial rotation), found ", v);
  const std::vector<int64_t> kv_heads = per_layer("attention.head_count_kv");
  c["head_dim"] = head_swa;
  // The base count is the sliding layers' (the first one's; else layer 0's).
  size_t first_sliding = 0;
  while (first_sliding + 1 < sliding.size() && !sliding[first_sliding]) ++first_sliding;
  c["num_key_value_heads"] = kv_heads[first_sliding];
  json overrides = json::object();
  for (int64_t l = 0; l < layers; ++l)
    overrides[std::to_string(l)] = {{"head_dim", sliding[size_t(l)] ? head_swa : head_full},
                                    {"num_key_value_heads", kv_heads[size_t(l)]}};
  c["per_layer_config"] = overrides;
  // attention_k_eq_v: the full layers that keep their own K/V have no attn_v.
  const int64_t shared = f.get_int(key("attention.shared_kv_layers"), 0);
  c["num_kv_shared_layers"] = shared;
  for (int64_t l = 0; l < layers - shared; ++l)
    if (!sliding[size_t(l)]) {
      c["attention_k_eq_v"] = f.find_tensor("blk." + std::to_string(l) + ".attn_v.weight") == nullptr;
      break;
    }
  c["attention_bias"] = f.find_tensor("blk.0.attn_q.bias") != nullptr;

  // MLP widths: KV-shared layers twice as wide with use_double_wide_mlp.
  const std::vector<int64_t> ff = per_layer("feed_forward_length");
  c["intermediate_size"] = ff[0];
  bool double_wide = false;
  for (int64_t l = 0; l < layers; ++l) {
    const bool is_shared = l >= layers - shared;
    const int64_t want = is_shared && ff[size_t(l)] != ff[0] ? 2 * ff[0] : ff[0];
    if (ff[size_t(l)] != want)
      fail(path, ": ", key("feed_forward_length"), "[", l, "]: expected ", ff[0],
           is_shared ? " or twice it (a KV-shared layer's double-wide MLP)" : "", ", found ", ff[size_t(l)]);
    double_wide = double_wide || ff[size_t(l)] != ff[0];
  }
  c["use_double_wide_mlp"] = double_wide;

  // Per-layer inputs.
  const int64_t ple = f.get_int(key("embedding_length_per_layer_input"), 0);
  c["hidden_size_per_layer_input"] = ple;
  if (ple > 0) {
    const formats::GgufTensorInfo* t = f.find_tensor("per_layer_token_embd.weight");
    if (t == nullptr) fail(path, ": tensor 'per_layer_token_embd.weight' expected (per-layer inputs), found absent");
    if (t->shape.size() != 2) fail(path, ": tensor 'per_layer_token_embd.weight' expected rank 2");
    c["vocab_size_per_layer_input"] = t->shape[0];
  }

  // RoPE: the sliding layers' plain; the full layers' proportional, its
  // rotated pairs those rope_freqs leaves at factor 1 (the rest 1e30: still).
  json rope = {{"sliding_attention",
                {{"rope_type", "default"}, {"rope_theta", f.get_float(key("rope.freq_base_swa"), 10000.0)}}}};
  json full = {{"rope_theta", required("rope.freq_base").as_float()}};
  if (f.find_tensor("rope_freqs.weight") != nullptr) {
    Tensor factors = f.tensor("rope_freqs.weight");
    check_shape(factors, {head_full / 2}, "rope_freqs.weight", path);
    if (factors.dtype() == DType::I32) fail(path, ": tensor 'rope_freqs.weight' expected a float type, found i32");
    if (factors.dtype() != DType::F32) factors = to_f32(factors);
    int64_t rotated = 0;
    while (rotated < head_full / 2 && factors.data_as<float>()[rotated] == 1.0f) ++rotated;
    for (int64_t i = rotated; i < head_full / 2; ++i)
      if (!(factors.data_as<float>()[i] >= 1e29f))
        fail(path, ": tensor 'rope_freqs.weight' [", i,
             "]: expected 1 on the rotated pairs, then 1e30 (proportional RoPE), found ", factors.data_as<float>()[i]);
    full["rope_type"] = "proportional";
    full["partial_rotary_factor"] = double(2 * rotated) / double(head_full);
  } else {
    full["rope_type"] = "default";
  }
  rope["full_attention"] = full;
  c["rope_parameters"] = rope;

  if (const formats::GgufValue* experts = f.find(key("expert_count"))) {
    c["enable_moe_block"] = true;
    c["num_experts"] = experts->as_int();
    c["top_k_experts"] = required("expert_used_count").as_int();
    c["moe_intermediate_size"] = required("expert_feed_forward_length").as_int();
  }
  return c;
}

}  // namespace

bool is_gemma4_gguf(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return false;
  try {
    return formats::GgufFile::open(path)->get_string("general.architecture", "") == kArch;
  } catch (const Error&) {
    return false;
  }
}

Gemma4Checkpoint load_gemma4_gguf_checkpoint(const std::string& path) {
  std::shared_ptr<formats::GgufFile> file = formats::GgufFile::open(path);
  const formats::GgufFile& f = *file;
  if (const std::string arch = f.get_string("general.architecture", ""); arch != kArch)
    fail(path, ": general.architecture: expected \"gemma4\", found \"", arch, "\"");
  Gemma4Checkpoint ck;
  ck.files = file;
  ck.gguf = file;
  ck.config = read_gemma4_config(config_from_metadata(f), path + " (GGUF metadata, named as config.json keys)");
  const Gemma4Config& g = ck.config;
  const ModelConfig& c = g.base;
  Gemma4Weights& w = ck.weights;

  // Weights are float or quantized; an i32 one would fail only in the first
  // forward (an i32 embedding inside a worker thread), without its name.
  auto not_index = [&](const Tensor& t, const std::string& name) {
    if (t.dtype() == DType::I32) fail(path, ": tensor '", name, "' expected a float type, found i32");
    return t;
  };
  auto matrix = [&](const std::string& name, int64_t rows, int64_t cols) {
    Tensor t = f.tensor(name);
    check_shape(t, {rows, cols}, name, path);
    return not_index(t, name);
  };
  auto vector = [&](const std::string& name, int64_t n) {
    Tensor t = f.tensor(name);
    check_shape(t, {n}, name, path);  // before the f32 copy, which a hostile size would make huge
    return to_f32(not_index(t, name));
  };

  auto stacked = [&](const std::string& name, std::initializer_list<int64_t> shape) {
    Tensor t = f.tensor(name);
    check_shape(t, shape, name, path);
    return not_index(t, name);
  };
  auto host_floats = [&](const std::string& name, int64_t n) {
    Tensor t = vector(name, n);
    std::vector<float> v(t.data_as<float>(), t.data_as<float>() + n);
    if (const auto i = first_non_finite(v))
      fail(path, ": tensor '", name, "' [", *i, "]: expected a finite number, found ", v[size_t(*i)]);
    return v;
  };

  const int64_t hidden = c.hidden_size;
  w.token_embd = matrix("token_embd.weight", c.vocab_size, hidden);
  w.output_norm = vector("output_norm.weight", hidden);
  w.output = c.tied_embeddings ? w.token_embd : matrix("output.weight", c.vocab_size, hidden);
  const int64_t P = g.ple_dim, L = c.n_layers;
  if (P > 0) {
    w.ple_embd = matrix("per_layer_token_embd.weight", g.ple_vocab, L * P);
    w.ple_model_proj = matrix("per_layer_model_proj.weight", L * P, hidden);
    w.ple_proj_norm = vector("per_layer_proj_norm.weight", P);
  }
  for (int i = 0; i < c.n_layers; ++i) {
    const Gemma4LayerSpec& spec = g.layers[size_t(i)];
    const std::string p = "blk." + std::to_string(i) + ".";
    const int64_t hd = spec.head_dim, q_dim = int64_t(c.n_heads) * hd, kv_dim = int64_t(spec.n_kv_heads) * hd;
    Gemma4LayerWeights l;
    l.attn_norm = vector(p + "attn_norm.weight", hidden);
    l.wq = matrix(p + "attn_q.weight", q_dim, hidden);
    l.q_norm = vector(p + "attn_q_norm.weight", hd);
    if (!g.kv_shared(i)) {
      l.wk = matrix(p + "attn_k.weight", kv_dim, hidden);
      if (!spec.v_from_k) l.wv = matrix(p + "attn_v.weight", kv_dim, hidden);
      l.k_norm = vector(p + "attn_k_norm.weight", hd);
      l.v_norm = ops::zeros(DType::F32, {hd}, Device::CPU);
      std::fill_n(l.v_norm.data_as<float>(), hd, 1.0f);
    }
    l.wo = matrix(p + "attn_output.weight", hidden, q_dim);
    if (g.attention_bias) {
      l.bq = vector(p + "attn_q.bias", q_dim);
      if (l.wk.defined()) l.bk = vector(p + "attn_k.bias", kv_dim);
      if (l.wv.defined()) l.bv = vector(p + "attn_v.bias", kv_dim);
      l.bo = vector(p + "attn_output.bias", hidden);
    }
    l.post_attn_norm = vector(p + "post_attention_norm.weight", hidden);
    l.pre_ffn_norm = vector(p + "ffn_norm.weight", hidden);
    l.post_ffn_norm = vector(p + "post_ffw_norm.weight", hidden);
    l.w_gate = matrix(p + "ffn_gate.weight", spec.intermediate_size, hidden);
    l.w_up = matrix(p + "ffn_up.weight", spec.intermediate_size, hidden);
    l.w_down = matrix(p + "ffn_down.weight", hidden, spec.intermediate_size);
    if (f.find_tensor(p + "layer_output_scale.weight") != nullptr) {
      const float s = vector(p + "layer_output_scale.weight", 1).data_as<float>()[0];
      if (!std::isfinite(s)) fail(path, ": tensor '", p, "layer_output_scale.weight': expected finite, found ", s);
      l.layer_scalar = s;
    }
    if (P > 0) {
      l.ple_gate = matrix(p + "inp_gate.weight", P, hidden);
      l.ple_proj = matrix(p + "proj.weight", hidden, P);
      l.ple_post_norm = vector(p + "post_norm.weight", hidden);
    }
    if (g.moe) {
      const int64_t E = g.n_experts, I = g.moe_intermediate_size;
      l.router_proj = matrix(p + "ffn_gate_inp.weight", E, hidden);
      // router.scale (ffn_gate_inp.scale) folded with hidden^−½ into one norm
      // weight, as load_gemma4.cpp does; per_expert_scale is ffn_down_exps.scale.
      const std::vector<float> scale = host_floats(p + "ffn_gate_inp.scale", hidden);
      l.router_norm = ops::zeros(DType::F32, {hidden}, Device::CPU);
      const float root = float(1.0 / std::sqrt(double(hidden)));
      for (int64_t j = 0; j < hidden; ++j) l.router_norm.data_as<float>()[j] = scale[size_t(j)] * root;
      l.expert_scale = host_floats(p + "ffn_down_exps.scale", E);
      l.experts_gate_up = stacked(p + "ffn_gate_up_exps.weight", {E, 2 * I, hidden});
      l.experts_down = stacked(p + "ffn_down_exps.weight", {E, hidden, I});
      l.post_ffn_norm_1 = vector(p + "post_ffw_norm_1.weight", hidden);
      l.pre_ffn_norm_2 = vector(p + "pre_ffw_norm_2.weight", hidden);
      l.post_ffn_norm_2 = vector(p + "post_ffw_norm_2.weight", hidden);
    }
    w.layers.push_back(std::move(l));
  }
  ck.config.base.weight_dtype = w.token_embd.dtype();
  ck.chat_template = f.get_string("tokenizer.chat_template", "");
  return ck;
}

}  // namespace brioche::model
