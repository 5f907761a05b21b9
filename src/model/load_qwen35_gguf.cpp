// Qwen 3.5 GGUF files -> Qwen35Checkpoint.
//
// llama.cpp's convert_hf_to_gguf.py (Qwen3_5TextModel / Qwen3_5MoeTextModel)
// writes metadata "<arch>.*" (arch qwen35 or qwen35moe) and tensors "blk.N.*":
//
//   transformers (model.layers.N.)     GGUF (blk.N.)           changed by the converter
//   input_layernorm                    attn_norm               + 1 (as brioche keeps it)
//   post_attention_layernorm           post_attention_norm     + 1
//   linear_attn.in_proj_qkv            attn_qkv                V rows tiled
//   linear_attn.in_proj_z              attn_gate               rows tiled
//   linear_attn.in_proj_b / _a         ssm_beta / ssm_alpha    rows tiled
//   linear_attn.conv1d [C, 1, K]       ssm_conv1d [C, K]       V channels tiled
//   linear_attn.A_log                  ssm_a                   -exp(A_log), tiled
//   linear_attn.dt_bias                ssm_dt.bias             tiled
//   linear_attn.norm                   ssm_norm                -
//   linear_attn.out_proj               ssm_out                 V columns tiled
//   self_attn.{q,k,v,o}_proj           attn_{q,k,v,output}     -
//   self_attn.{q,k}_norm               attn_{q,k}_norm         + 1
//   mlp.{gate,up,down}_proj            ffn_{gate,up,down}      -
//   mlp.gate                           ffn_gate_inp            -
//   mlp.experts (stacked)              ffn_{gate,up,down}_exps [E, I, H] / [E, H, I]
//   mlp.shared_expert.*                ffn_{gate,up,down}_shexp
//   mlp.shared_expert_gate             ffn_gate_inp_shexp
//
// "Tiled": with fewer key heads than value heads (r = v_heads / k_heads value
// heads per key head) transformers stores the value heads grouped by key
// head, [g0v0 .. g0v(r-1), g1v0 ..]; the converter reorders them to
// [g0v0, g1v0, .., g0v1, g1v1, ..] for ggml's broadcast. brioche's forward
// reads the grouped order, so every tiled tensor is put back: grouped head
// g·r + j is tiled head j·k_heads + g. Rows are whole quantized blocks (a
// byte move); out_proj's columns move in head-wide chunks, a byte move when
// the head is a whole number of blocks, else through f32.
#include <cmath>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "formats/gguf.h"
#include "model/config_fields.h"
#include "model/load_qwen35_gguf.h"
#include "model/qwen35_config.h"
#include "model/weights.h"
#include "ops/quantize.h"

namespace brioche::model {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

bool is_qwen35_arch(const std::string& arch) { return arch == "qwen35" || arch == "qwen35moe"; }

// The metadata as the config.json keys read_qwen35_config reads (its errors
// then name those keys, in a source that says where they came from).
json config_from_metadata(const formats::GgufFile& f, const std::string& arch) {
  const std::string& path = f.path();
  auto key = [&](const char* suffix) { return arch + "." + suffix; };
  auto required = [&](const char* suffix) {
    const formats::GgufValue* v = f.find(key(suffix));
    if (v == nullptr) fail(path, ": metadata '", key(suffix), "' expected, found absent");
    return v;
  };
  auto integer = [&](const char* suffix) { return required(suffix)->as_int(); };

  json c;
  const formats::GgufTensorInfo* embedding = f.find_tensor("token_embd.weight");
  if (embedding == nullptr) fail(path, ": tensor 'token_embd.weight' expected, found absent");
  if (embedding->shape.size() != 2)
    fail(path, ": tensor 'token_embd.weight' expected rank 2 [vocab, hidden], found rank ", embedding->shape.size());
  c["vocab_size"] = embedding->shape[0];
  c["hidden_size"] = integer("embedding_length");
  // A file converted with its MTP head has those layers after the model's.
  const int64_t blocks = integer("block_count"), mtp = f.get_int(key("nextn_predict_layers"), 0);
  if (blocks < 1 || blocks > kMaxLayers)
    fail(path, ": ", key("block_count"), ": expected 1..", kMaxLayers, ", found ", blocks);
  if (mtp < 0 || mtp >= blocks)
    fail(path, ": ", key("nextn_predict_layers"), ": expected 0..", blocks - 1, " (", key("block_count"), " ", blocks,
         "), found ", mtp);
  c["num_hidden_layers"] = blocks - mtp;
  c["num_attention_heads"] = integer("attention.head_count");
  c["num_key_value_heads"] = f.get_int(key("attention.head_count_kv"), integer("attention.head_count"));
  const int64_t head_dim = integer("attention.key_length");
  c["head_dim"] = head_dim;
  if (const int64_t v = f.get_int(key("attention.value_length"), head_dim); v != head_dim)
    fail(path, ": ", key("attention.value_length"), ": expected ", head_dim, " (= key_length), found ", v);
  c["rms_norm_eps"] = f.get_float(key("attention.layer_norm_rms_epsilon"), 1e-6);
  c["max_position_embeddings"] = f.get_int(key("context_length"), 0);
  c["tie_word_embeddings"] = f.find_tensor("output.weight") == nullptr;
  if (arch == "qwen35moe") {
    c["num_experts"] = integer("expert_count");
    c["num_experts_per_tok"] = integer("expert_used_count");
    c["moe_intermediate_size"] = integer("expert_feed_forward_length");
    c["shared_expert_intermediate_size"] = f.get_int(key("expert_shared_feed_forward_length"), 0);
  } else {
    c["intermediate_size"] = integer("feed_forward_length");
  }
  // Rotary dims over head_dim (the text model's interleaved MRoPE with one
  // position per token is plain RoPE over those dims).
  const int64_t rotary = f.get_int(key("rope.dimension_count"), head_dim);
  c["rope_parameters"] = {{"rope_type", "default"},
                          {"rope_theta", f.get_float(key("rope.freq_base"), 10000.0)},
                          {"partial_rotary_factor", head_dim > 0 ? double(rotary) / double(head_dim) : 0.0}};
  const int64_t v_heads = integer("ssm.time_step_rank");
  c["linear_num_key_heads"] = integer("ssm.group_count");
  c["linear_num_value_heads"] = v_heads;
  c["linear_key_head_dim"] = integer("ssm.state_size");
  const int64_t inner = integer("ssm.inner_size");
  if (v_heads <= 0 || inner % v_heads != 0)
    fail(path, ": ", key("ssm.inner_size"), ": expected a multiple of ", key("ssm.time_step_rank"), " ", v_heads,
         ", found ", inner);
  c["linear_value_head_dim"] = inner / v_heads;
  c["linear_conv_kernel_dim"] = integer("ssm.conv_kernel");
  if (const formats::GgufValue* layers = f.find(key("attention.recurrent_layers"))) {
    if (!layers->is_array() || int64_t(layers->array_size()) < blocks - mtp)
      fail(path, ": ", key("attention.recurrent_layers"), ": expected an array of ", blocks - mtp, " booleans, found ",
           layers->describe());
    json types = json::array();
    for (int64_t l = 0; l < blocks - mtp; ++l)
      types.push_back(layers->at(size_t(l)).as_bool() ? "linear_attention" : "full_attention");
    c["layer_types"] = types;
  } else {
    c["full_attention_interval"] = f.get_int(key("full_attention_interval"), 4);
  }
  return c;
}

// Tiled -> grouped order of `n_heads` = k_heads · r heads of `head_rows`
// rows each, within rows [first, first + n_heads · head_rows) of a
// [rows, cols] tensor of any dtype (rows are whole blocks): a new tensor.
Tensor untile_rows(const Tensor& t, int64_t first, int k_heads, int r, int64_t head_rows) {
  Tensor out = Tensor::zeros(t.dtype(), {t.dim(0), t.dim(1)});
  const size_t row_bytes = t.nbytes() / size_t(t.dim(0));
  const auto* src = static_cast<const uint8_t*>(t.data());
  auto* dst = static_cast<uint8_t*>(out.data());
  std::memcpy(dst, src, t.nbytes());
  const size_t head_bytes = size_t(head_rows) * row_bytes;
  for (int g = 0; g < k_heads; ++g)
    for (int j = 0; j < r; ++j) {
      const size_t grouped = size_t(g * r + j), tiled = size_t(j * k_heads + g);
      std::memcpy(dst + size_t(first) * row_bytes + grouped * head_bytes,
                  src + size_t(first) * row_bytes + tiled * head_bytes, head_bytes);
    }
  return out;
}

// The same along the columns of [rows, k_heads · r · head_cols]: each row's
// head-wide chunks move whole when a head is a whole number of blocks. Else
// (Q8_0 over heads narrower than 32, a K-quant's 256-wide blocks over
// 128-wide heads) the matrix is moved and kept in f32: exact, at 4 bytes a
// weight for this one matrix per linear layer (requantizing to Q8_0 would
// put two heads' values in one block and change the weights: 6e-2 of the
// largest logit on the random Q8_0 fixture, which amplifies such changes).
Tensor untile_columns(Tensor t, int k_heads, int r, int64_t head_cols) {
  if (head_cols % dtype_info(t.dtype()).block_elems != 0) t = ops::convert(t, DType::F32);
  const DTypeInfo used = dtype_info(t.dtype());
  const size_t chunk = size_t(head_cols / used.block_elems) * size_t(used.block_bytes);
  Tensor out = Tensor::zeros(t.dtype(), {t.dim(0), t.dim(1)});
  const size_t row_bytes = t.nbytes() / size_t(t.dim(0));
  const auto* src = static_cast<const uint8_t*>(t.data());
  auto* dst = static_cast<uint8_t*>(out.data());
  for (int64_t row = 0; row < t.dim(0); ++row)
    for (int g = 0; g < k_heads; ++g)
      for (int j = 0; j < r; ++j)
        std::memcpy(dst + size_t(row) * row_bytes + size_t(g * r + j) * chunk,
                    src + size_t(row) * row_bytes + size_t(j * k_heads + g) * chunk, chunk);
  return out;
}

}  // namespace

bool is_qwen35_gguf(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return false;
  try {
    return is_qwen35_arch(formats::GgufFile::open(path)->get_string("general.architecture", ""));
  } catch (const Error&) {
    return false;
  }
}

Qwen35Checkpoint load_qwen35_gguf_checkpoint(const std::string& path) {
  std::shared_ptr<formats::GgufFile> file = formats::GgufFile::open(path);
  const formats::GgufFile& f = *file;
  const std::string arch = f.get_string("general.architecture", "");
  if (!is_qwen35_arch(arch))
    fail(path, ": general.architecture: expected \"qwen35\" or \"qwen35moe\", found \"", arch, "\"");
  const json config = config_from_metadata(f, arch);
  Qwen35Checkpoint ck;
  ck.gguf = file;  // the tokenizer and chat template live in it
  read_qwen35_config(
      ConfigFields{.obj = config, .prefix = "", .source = path + " (GGUF metadata, named as config.json keys)"},
      arch == "qwen35moe", ck.config, ck.qwen);
  const ModelConfig& c = ck.config;
  const Qwen35Config& q = ck.qwen;
  const int64_t hidden = c.hidden_size;
  const int k_heads = q.linear_k_heads, r = q.linear_v_heads / q.linear_k_heads;

  // A matrix is float or quantized; an i32 one would fail only in the first
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
  auto floats = [&](const std::string& name, std::initializer_list<int64_t> shape) {
    Tensor t = f.tensor(name);
    check_shape(t, shape, name, path);  // before the f32 copy, which a hostile size would make huge
    if (t.dtype() == DType::I32) fail(path, ": tensor '", name, "' expected a float type, found i32");
    return to_f32(t);
  };
  auto vector = [&](const std::string& name, int64_t n) { return floats(name, {n}); };

  ck.token_embd = matrix("token_embd.weight", c.vocab_size, hidden);
  ck.output_norm = vector("output_norm.weight", hidden);
  ck.output = c.tied_embeddings ? ck.token_embd : matrix("output.weight", c.vocab_size, hidden);

  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    Qwen35Layer layer;
    layer.input_norm = vector(p + "attn_norm.weight", hidden);
    layer.post_norm = vector(p + "post_attention_norm.weight", hidden);
    if (q.linear_layers[size_t(l)]) {
      Qwen35LinearAttention& la = layer.linear;
      const int64_t keys = 2 * int64_t(q.key_width());  // q and k rows/channels, untouched
      la.in_qkv =
          untile_rows(matrix(p + "attn_qkv.weight", q.conv_channels(), hidden), keys, k_heads, r, q.linear_value_dim);
      la.in_z = untile_rows(matrix(p + "attn_gate.weight", q.value_width(), hidden), 0, k_heads, r, q.linear_value_dim);
      la.in_b = untile_rows(matrix(p + "ssm_beta.weight", q.linear_v_heads, hidden), 0, k_heads, r, 1);
      la.in_a = untile_rows(matrix(p + "ssm_alpha.weight", q.linear_v_heads, hidden), 0, k_heads, r, 1);
      la.conv = untile_rows(floats(p + "ssm_conv1d.weight", {q.conv_channels(), q.conv_kernel}), keys, k_heads, r,
                            q.linear_value_dim);
      // ssm_a = -exp(A_log): A_log = log(-ssm_a), defined for ssm_a < 0 only.
      Tensor a = untile_rows(vector(p + "ssm_a", q.linear_v_heads).reshape({q.linear_v_heads, 1}), 0, k_heads, r, 1);
      la.a_log = Tensor::zeros(DType::F32, {q.linear_v_heads});
      for (int h = 0; h < q.linear_v_heads; ++h) {
        const float v = a.data_as<float>()[h];
        if (!(v < 0.0f) || !std::isfinite(v))
          fail(path, ": tensor '", p, "ssm_a' [", h, "]: expected a finite negative number (-exp(A_log)), found ", v);
        la.a_log.data_as<float>()[h] = std::log(-v);
      }
      la.dt_bias =
          untile_rows(vector(p + "ssm_dt.bias", q.linear_v_heads).reshape({q.linear_v_heads, 1}), 0, k_heads, r, 1)
              .reshape({q.linear_v_heads});
      for (int h = 0; h < q.linear_v_heads; ++h)  // softplus(a + dt_bias) of a non-finite one poisons the state
        if (!std::isfinite(la.dt_bias.data_as<float>()[h]))
          fail(path, ": tensor '", p, "ssm_dt.bias' (head ", h, "): expected a finite number, found ",
               la.dt_bias.data_as<float>()[h]);
      la.norm = vector(p + "ssm_norm.weight", q.linear_value_dim);
      la.out = untile_columns(matrix(p + "ssm_out.weight", hidden, q.value_width()), k_heads, r, q.linear_value_dim);
    } else {
      Qwen35FullAttention& fa = layer.full;
      fa.wq = matrix(p + "attn_q.weight", int64_t(c.q_dim()) * 2, hidden);
      fa.wk = matrix(p + "attn_k.weight", c.kv_dim(), hidden);
      fa.wv = matrix(p + "attn_v.weight", c.kv_dim(), hidden);
      fa.wo = matrix(p + "attn_output.weight", hidden, c.q_dim());
      fa.q_norm = vector(p + "attn_q_norm.weight", c.head_dim);
      fa.k_norm = vector(p + "attn_k_norm.weight", c.head_dim);
    }
    if (q.n_experts == 0) {
      layer.mlp = {.gate = matrix(p + "ffn_gate.weight", c.intermediate_size, hidden),
                   .up = matrix(p + "ffn_up.weight", c.intermediate_size, hidden),
                   .down = matrix(p + "ffn_down.weight", hidden, c.intermediate_size)};
    } else {
      const int64_t inter = q.expert_intermediate, E = q.n_experts;
      layer.router = matrix(p + "ffn_gate_inp.weight", E, hidden);
      auto stacked = [&](const std::string& name, std::initializer_list<int64_t> shape) {
        Tensor t = f.tensor(name);
        check_shape(t, shape, name, path);
        return not_index(t, name);
      };
      Tensor gate = stacked(p + "ffn_gate_exps.weight", {E, inter, hidden});
      Tensor up = stacked(p + "ffn_up_exps.weight", {E, inter, hidden});
      Tensor down = stacked(p + "ffn_down_exps.weight", {E, hidden, inter});
      for (int e = 0; e < q.n_experts; ++e)
        layer.experts.push_back({.gate = gate.select(e), .up = up.select(e), .down = down.select(e)});
      if (q.shared_expert_intermediate > 0) {
        const int64_t si = q.shared_expert_intermediate;
        layer.shared_expert = {.gate = matrix(p + "ffn_gate_shexp.weight", si, hidden),
                               .up = matrix(p + "ffn_up_shexp.weight", si, hidden),
                               .down = matrix(p + "ffn_down_shexp.weight", hidden, si)};
        layer.shared_expert_gate = matrix(p + "ffn_gate_inp_shexp.weight", 1, hidden);
      } else if (f.find_tensor(p + "ffn_gate_inp_shexp.weight") || f.find_tensor(p + "ffn_up_shexp.weight")) {
        // Length 0 (or absent) means no shared expert: one in the file would be dropped silently.
        fail(path, ": ", arch, ".expert_shared_feed_forward_length: expected the width of ", p,
             "ffn_*_shexp (present), found ", q.shared_expert_intermediate);
      }
    }
    ck.layers.push_back(std::move(layer));
  }
  ck.config.weight_dtype = ck.token_embd.dtype();
  ck.chat_template = f.get_string("tokenizer.chat_template", "");
  return ck;
}

}  // namespace brioche::model
