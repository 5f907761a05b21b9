// Random-weight Llama-family checkpoints in real architectures' shapes, for
// speed tests on machines without network access (the H200 test machine).
//
// Weights are random but well-formed: dense values uniform in ±0.05;
// quantized blocks have random quants with fixed small scales, so every
// dequantized weight is finite and O(0.1). Speed does not depend on the
// values (they are not zeros, which can run faster than real data).
// Used by tools/gen_model.cpp (writes GGUF, or a safetensors directory through
// gen_model_safetensors.h) and bench/cuda_model.cpp (builds the model in
// memory).
#pragma once

#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "core/thread_pool.h"
#include "formats/gguf.h"
#include "model/weights.h"

namespace brioche::tools {

struct ShapePreset {
  std::string name, architecture;
  int vocab, hidden, intermediate, layers, heads, kv_heads, head_dim;
  float rope_theta;
  bool tied, qkv_bias;
};

inline const std::vector<ShapePreset>& shape_presets() {
  static const std::vector<ShapePreset> presets = {
      {"llama3-8b", "llama", 128256, 4096, 14336, 32, 32, 8, 128, 500000.0f, false, false},
      {"llama3-70b", "llama", 128256, 8192, 28672, 80, 64, 8, 128, 500000.0f, false, false},
      {"llama3.2-1b", "llama", 128256, 2048, 8192, 16, 32, 8, 64, 500000.0f, true, false},
      {"qwen2.5-7b", "qwen2", 152064, 3584, 18944, 28, 28, 4, 128, 1000000.0f, false, true},
      {"smollm2-135m", "llama", 49152, 576, 1536, 30, 9, 3, 64, 100000.0f, true, false},
      {"smollm2-1.7b", "llama", 49152, 2048, 8192, 24, 32, 32, 64, 130000.0f, true, false},
  };
  return presets;
}

inline const ShapePreset& find_shape(const std::string& name) {
  std::string known;
  for (const ShapePreset& p : shape_presets()) {
    if (p.name == name) return p;
    known += (known.empty() ? "" : ", ") + p.name;
  }
  fail("unknown model shape '", name, "' (expected one of: ", known, ")");
}

namespace detail {

inline uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Fills one row of `dtype` with random well-formed content.
inline void random_row(DType dtype, int64_t n, uint64_t seed, uint8_t* out) {
  uint64_t s = seed;
  const size_t bytes = row_bytes(dtype, n);
  for (size_t i = 0; i < bytes; i += 8) {
    uint64_t r = splitmix(s);
    std::memcpy(out + i, &r, std::min<size_t>(8, bytes - i));
  }
  auto f16 = [](uint8_t* p, float v) {
    uint16_t h = f32_to_f16(v);
    std::memcpy(p, &h, 2);
  };
  auto f32 = [](uint8_t* p, float v) { std::memcpy(p, &v, 4); };
  const auto info = dtype_info(dtype);
  const int64_t blocks = n / info.block_elems;
  switch (dtype) {
    case DType::F32: {
      auto* v = reinterpret_cast<float*>(out);
      for (int64_t i = 0; i < n; ++i) v[i] = float(int32_t(splitmix(s) >> 40) - (1 << 23)) * (0.05f / (1 << 23));
      return;
    }
    case DType::F16:
    case DType::BF16: {
      auto* v = reinterpret_cast<uint16_t*>(out);
      for (int64_t i = 0; i < n; ++i) {
        float x = float(int32_t(v[i]) - 32768) * (0.05f / 32768.0f);
        v[i] = dtype == DType::F16 ? f32_to_f16(x) : f32_to_bf16(x);
      }
      return;
    }
    default: break;
  }
  for (int64_t b = 0; b < blocks; ++b) {
    uint8_t* blk = out + b * info.block_bytes;
    switch (dtype) {
      case DType::Q8_0: f16(blk, 0.0004f); break;
      case DType::Q4_0: f16(blk, 0.006f); break;
      case DType::Q4_1:
        f16(blk, 0.006f);
        f16(blk + 2, -0.045f);
        break;
      case DType::Q4_K:
      case DType::Q5_K:
        f16(blk, 0.0002f);
        f16(blk + 2, 0.0002f);
        break;
      case DType::Q6_K: f16(blk + 208, 0.00003f); break;
      default:  // MLX affine: f32 scale, f32 bias
        f32(blk, info.block_bytes - 8 == info.block_elems / 2 ? 0.006f : 0.0004f);
        f32(blk + 4, -0.045f);
        break;
    }
  }
}

}  // namespace detail

// A CPU tensor [rows, cols] of random content; rows are filled in parallel.
// A row length that is not a multiple of the dtype's block falls back to Q8_0
// (as llama.cpp's quantizer does for such tensors, e.g. SmolLM2's 576).
inline Tensor random_tensor(DType dtype, int64_t rows, int64_t cols, uint64_t seed) {
  if (cols % dtype_info(dtype).block_elems != 0) dtype = DType::Q8_0;
  Tensor t = Tensor::zeros(dtype, {rows, cols});
  ThreadPool::global().parallel_for(rows, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      detail::random_row(dtype, cols, seed * 0x100000001B3ull + uint64_t(r), static_cast<uint8_t*>(t.row_ptr(r)));
  });
  return t;
}

inline Tensor ones(int64_t n) {
  Tensor t = Tensor::zeros(DType::F32, {n});
  for (int64_t i = 0; i < n; ++i) t.data_as<float>()[i] = 1.0f;
  return t;
}

// One layer's weights, each tensor generated on the CPU and handed to
// `place` (a copy to the device, or keep it), so that a large model is never
// whole in host memory: norms f32 ones, matrices in `dtype`, q/k/v biases
// small random f32 when p.qkv_bias. Each random tensor takes the next seed
// (++id).
template <class Place>
model::LayerWeights random_layer(const ShapePreset& p, DType dtype, uint64_t& id, Place place) {
  const int64_t q_dim = int64_t(p.heads) * p.head_dim, kv_dim = int64_t(p.kv_heads) * p.head_dim;
  model::LayerWeights lw;
  lw.attn_norm = place(ones(p.hidden));
  lw.ffn_norm = place(ones(p.hidden));
  lw.wq = place(random_tensor(dtype, q_dim, p.hidden, ++id));
  lw.wk = place(random_tensor(dtype, kv_dim, p.hidden, ++id));
  lw.wv = place(random_tensor(dtype, kv_dim, p.hidden, ++id));
  lw.wo = place(random_tensor(dtype, p.hidden, q_dim, ++id));
  lw.w_gate = place(random_tensor(dtype, p.intermediate, p.hidden, ++id));
  lw.w_up = place(random_tensor(dtype, p.intermediate, p.hidden, ++id));
  lw.w_down = place(random_tensor(dtype, p.hidden, p.intermediate, ++id));
  if (p.qkv_bias) {
    lw.bq = place(random_tensor(DType::F32, 1, q_dim, ++id).reshape({q_dim}));
    lw.bk = place(random_tensor(DType::F32, 1, kv_dim, ++id).reshape({kv_dim}));
    lw.bv = place(random_tensor(DType::F32, 1, kv_dim, ++id).reshape({kv_dim}));
  }
  return lw;
}

// The whole checkpoint in memory (CPU tensors); every matrix in `dtype`,
// norms f32 ones, biases small random f32.
inline model::Checkpoint random_checkpoint(const ShapePreset& p, DType dtype, uint64_t seed = 1) {
  model::Checkpoint ck;
  model::ModelConfig& c = ck.config;
  c.architecture = p.architecture;
  c.vocab_size = p.vocab;
  c.hidden_size = p.hidden;
  c.intermediate_size = p.intermediate;
  c.n_layers = p.layers;
  c.n_heads = p.heads;
  c.n_kv_heads = p.kv_heads;
  c.head_dim = p.head_dim;
  c.rope.theta = p.rope_theta;
  c.rope.style = p.architecture == "llama" ? ops::RopeStyle::Interleaved : ops::RopeStyle::NeoX;
  c.max_context = 131072;
  c.tied_embeddings = p.tied;
  c.qkv_bias = p.qkv_bias;
  c.weight_dtype = dtype;
  ck.source = "random:" + p.name + ":" + std::string(dtype_name(dtype));
  model::ModelWeights& w = ck.weights;
  uint64_t id = seed * 1000003;
  w.token_embd = random_tensor(dtype, p.vocab, p.hidden, ++id);
  w.output = p.tied ? w.token_embd : random_tensor(dtype, p.vocab, p.hidden, ++id);
  w.output_norm = ones(p.hidden);
  for (int l = 0; l < p.layers; ++l) w.layers.push_back(random_layer(p, dtype, id, [](Tensor t) { return t; }));
  return ck;
}

// Writes the checkpoint as a GGUF v3 file llama.cpp-style names and metadata
// (no tokenizer: for speed tests through Model::load, not for chat).
// `extra` metadata (e.g. a real tokenizer's tokenizer.* keys) is added as is.
inline void write_gguf(const model::Checkpoint& ck, const std::string& path,
                       const std::vector<std::pair<std::string, formats::GgufValue>>& extra = {}) {
  using formats::GgufType;
  using formats::GgufValue;
  const model::ModelConfig& c = ck.config;
  const std::string a = c.architecture;
  formats::GgufWriter out;
  for (const auto& [key, value] : extra) out.add(key, value);
  out.add("general.architecture", GgufValue::string(a));
  out.add("general.name", GgufValue::string(ck.source));
  out.add(a + ".context_length", GgufValue::integer(GgufType::U32, c.max_context));
  out.add(a + ".embedding_length", GgufValue::integer(GgufType::U32, c.hidden_size));
  out.add(a + ".block_count", GgufValue::integer(GgufType::U32, c.n_layers));
  out.add(a + ".feed_forward_length", GgufValue::integer(GgufType::U32, c.intermediate_size));
  out.add(a + ".attention.head_count", GgufValue::integer(GgufType::U32, c.n_heads));
  out.add(a + ".attention.head_count_kv", GgufValue::integer(GgufType::U32, c.n_kv_heads));
  out.add(a + ".attention.key_length", GgufValue::integer(GgufType::U32, c.head_dim));
  out.add(a + ".attention.layer_norm_rms_epsilon", GgufValue::floating(GgufType::F32, c.rms_eps));
  out.add(a + ".rope.freq_base", GgufValue::floating(GgufType::F32, c.rope.theta));
  const model::ModelWeights& w = ck.weights;
  out.add_tensor("token_embd.weight", w.token_embd);
  out.add_tensor("output_norm.weight", w.output_norm);
  if (!c.tied_embeddings) out.add_tensor("output.weight", w.output);
  for (int l = 0; l < c.n_layers; ++l) {
    const model::LayerWeights& lw = w.layers[l];
    const std::string p = "blk." + std::to_string(l) + ".";
    out.add_tensor(p + "attn_norm.weight", lw.attn_norm);
    out.add_tensor(p + "attn_q.weight", lw.wq);
    out.add_tensor(p + "attn_k.weight", lw.wk);
    out.add_tensor(p + "attn_v.weight", lw.wv);
    out.add_tensor(p + "attn_output.weight", lw.wo);
    if (lw.bq.defined()) {
      out.add_tensor(p + "attn_q.bias", lw.bq);
      out.add_tensor(p + "attn_k.bias", lw.bk);
      out.add_tensor(p + "attn_v.bias", lw.bv);
    }
    out.add_tensor(p + "ffn_norm.weight", lw.ffn_norm);
    out.add_tensor(p + "ffn_gate.weight", lw.w_gate);
    out.add_tensor(p + "ffn_up.weight", lw.w_up);
    out.add_tensor(p + "ffn_down.weight", lw.w_down);
  }
  out.write(path);
}

}  // namespace brioche::tools
