// Rotary position embedding (RoPE), in place on q or k rows.
//
// For each head and each rotated pair (a, b) with inverse frequency w_i:
//   a' = a·cos(p·w_i) − b·sin(p·w_i),   b' = a·sin(p·w_i) + b·cos(p·w_i)
// The pairing differs by checkpoint layout:
//   Interleaved (GPT-J style): pairs (2i, 2i+1) — GGUF "llama", whose Q/K
//                weights llama.cpp's converter permuted.
//   NeoX (rotate-half):        pairs (i, i + d/2) — Hugging Face weights and
//                GGUF qwen2/qwen3.
// w_i = theta^(−2i/d), then scaled:
//   Linear: w_i / factor
//   Llama3: long wavelengths (> original_context/low_freq_factor) divided by
//           factor, short ones (< original_context/high_freq_factor) kept,
//           a linear blend in between (Llama 3.1 "rope_type": "llama3").
//   freq_factors (GGUF rope_freqs.weight): w_i / freq_factors[i].
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/tensor.h"

namespace brioche::ops {

enum class RopeStyle : uint8_t { Interleaved, NeoX };
enum class RopeScalingKind : uint8_t { None, Linear, Llama3 };

struct RopeScaling {
  RopeScalingKind kind = RopeScalingKind::None;
  float factor = 1.0f;
  float low_freq_factor = 1.0f;   // llama3 only
  float high_freq_factor = 4.0f;  // llama3 only
  int original_context = 8192;    // llama3 only: original_max_position_embeddings
};

// Inverse frequencies w_i for i in [0, rotary_dims/2), scaling applied.
// freq_factors, when not empty, has rotary_dims/2 entries.
std::vector<float> rope_inv_freq(int rotary_dims, float theta, const RopeScaling& scaling,
                                 std::span<const float> freq_factors = {});

struct RopeParams {
  RopeStyle style = RopeStyle::NeoX;
  int n_heads = 0;
  int head_dim = 0;
  std::span<const float> inv_freq;  // [head_dim/2]
};

// x: f32 [n_rows, n_heads * head_dim], rows contiguous; row r is at
// position positions[r].
void rope(Tensor& x, std::span<const int32_t> positions, const RopeParams& params);

}  // namespace brioche::ops
