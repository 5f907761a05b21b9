// A random checkpoint (gen_model_lib.h) written as a Hugging Face model
// directory: config.json and model.safetensors, in the names and layout the
// safetensors loader reads (model/load_safetensors.cpp). Dense weights are
// written as they are (f32, f16, bf16); MLX affine weights the way MLX
// writes them: "<p>.weight" u32 words of packed q, "<p>.scales" and
// "<p>.biases" in bf16 (the repacked blocks' f32 scale and bias rounded to
// bf16, as an MLX model stores them), with "quantization" {bits,
// group_size} in config.json. The GGUF block types have no safetensors form.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/half.h"
#include "formats/file_write.h"
#include "formats/safetensors.h"
#include "model/hf_export.h"
#include "model/weights.h"
#include "tools/gen_model_lib.h"

namespace brioche::tools {

namespace detail {

// `t` [rows, cols] under `prefix`: a dense tensor as "<prefix>.weight", or an
// MLX affine one as its packed words, scales and biases.
inline void add_matrix(formats::SafetensorsWriter& out, const std::string& prefix, const Tensor& t) {
  const DType dtype = t.dtype();
  const int bits = affine_bits(dtype), group = dtype_info(dtype).block_elems;
  if (bits == 0) {
    BRIOCHE_CHECK(!dtype_info(dtype).quantized, prefix, ".weight (rows of ", t.shape()[1], ") is ", dtype_name(dtype),
                  ", a GGUF block type, which has no safetensors form (also the "
                  "generator's fallback when the rows are no multiple of the type's group): write a .gguf, or "
                  "choose bf16, f16, f32 or an MLX affine type whose group divides every row");
    out.add(prefix + ".weight", t);
    return;
  }
  const int64_t rows = t.shape()[0], cols = t.shape()[1], groups = cols / group;
  const size_t q_bytes = size_t(group) * size_t(bits) / 8, block_bytes = size_t(dtype_info(dtype).block_bytes);
  std::vector<uint8_t> words(size_t(rows) * size_t(groups) * q_bytes);
  std::vector<uint16_t> scales(size_t(rows * groups)), biases(size_t(rows * groups));
  const auto* src = static_cast<const uint8_t*>(t.data());
  for (int64_t b = 0; b < rows * groups; ++b) {
    // A block is (f32 scale, f32 bias, q): MLX's words hold the q bytes in
    // the same order (element j at bit j·bits, least significant first).
    const uint8_t* block = src + size_t(b) * block_bytes;
    float scale, bias;
    std::memcpy(&scale, block, 4);
    std::memcpy(&bias, block + 4, 4);
    scales[size_t(b)] = f32_to_bf16(scale);
    biases[size_t(b)] = f32_to_bf16(bias);
    std::memcpy(words.data() + size_t(b) * q_bytes, block + 8, q_bytes);
  }
  out.add_raw(prefix + ".weight", "U32", {rows, cols * bits / 32}, std::move(words));
  out.add_raw(prefix + ".scales", "BF16", {rows, groups}, scales.data(), scales.size() * 2);
  out.add_raw(prefix + ".biases", "BF16", {rows, groups}, biases.data(), biases.size() * 2);
}

// config.json as `brioche export` writes it, plus MLX's quantization block
// for affine-quantized weights.
inline nlohmann::json hf_config(const model::Checkpoint& ck) {
  nlohmann::json cfg = model::hf_config_json(ck.config, DType::BF16, -1, -1);
  if (const int bits = affine_bits(ck.config.weight_dtype); bits != 0)
    cfg["quantization"] =
        cfg["quantization_config"] = {{"bits", bits}, {"group_size", dtype_info(ck.config.weight_dtype).block_elems}};
  return cfg;
}

}  // namespace detail

// Writes `ck` into the directory `dir` (created if missing): config.json and
// model.safetensors. Norms and biases are f32.
inline void write_safetensors_dir(const model::Checkpoint& ck, const std::string& dir) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  const model::ModelWeights& w = ck.weights;
  formats::SafetensorsWriter out;
  detail::add_matrix(out, "model.embed_tokens", w.token_embd);
  out.add("model.norm.weight", w.output_norm);
  if (!ck.config.tied_embeddings) detail::add_matrix(out, "lm_head", w.output);
  for (int l = 0; l < ck.config.n_layers; ++l) {
    const model::LayerWeights& lw = w.layers[size_t(l)];
    const std::string p = "model.layers." + std::to_string(l) + ".";
    out.add(p + "input_layernorm.weight", lw.attn_norm);
    out.add(p + "post_attention_layernorm.weight", lw.ffn_norm);
    detail::add_matrix(out, p + "self_attn.q_proj", lw.wq);
    detail::add_matrix(out, p + "self_attn.k_proj", lw.wk);
    detail::add_matrix(out, p + "self_attn.v_proj", lw.wv);
    detail::add_matrix(out, p + "self_attn.o_proj", lw.wo);
    if (lw.bq.defined()) {
      out.add(p + "self_attn.q_proj.bias", lw.bq);
      out.add(p + "self_attn.k_proj.bias", lw.bk);
      out.add(p + "self_attn.v_proj.bias", lw.bv);
    }
    detail::add_matrix(out, p + "mlp.gate_proj", lw.w_gate);
    detail::add_matrix(out, p + "mlp.up_proj", lw.w_up);
    detail::add_matrix(out, p + "mlp.down_proj", lw.w_down);
  }
  out.write((fs::path(dir) / "model.safetensors").string());
  formats::write_file_atomically((fs::path(dir) / "config.json").string(),
                                 [&](std::ostream& config) { config << detail::hf_config(ck).dump(2) << "\n"; });
}

}  // namespace brioche::tools
