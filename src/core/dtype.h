// Element types, including block-quantized weight formats.
//
// A quantized type stores `block_elems` consecutive elements of a row in one
// `block_bytes` block. Layouts of the GGUF types follow ggml exactly so GGUF
// tensors can be used straight from the mmap:
//   Q8_0  : f16 d;            int8 q[32]              x = d*q
//   Q4_0  : f16 d;            uint8 q[16] (2 per byte) x = d*(q-8)
//   Q4_1  : f16 d, m;         uint8 q[16]             x = d*q + m
//   Q4_K  : f16 d, dmin; u8 scales[12]; u8 q[128]     256-element super-block,
//           8 sub-blocks of 32 with 6-bit scale/min:  x = d*sc*q - dmin*m
//   Q5_K  : f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]
//   Q6_K  : u8 ql[128]; u8 qh[64]; int8 scales[16]; f16 d   x = d*sc*(q-32)
// MLX affine quantization (group size G, bits b) is repacked at load time into
// self-contained blocks:  f32 scale, f32 bias; packed b-bit q[G]   x = scale*q + bias
// (q packed little-end first within each byte/word, as MLX packs uint32 words).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace brioche {

enum class DType : uint8_t {
  F32,
  F16,
  BF16,
  I32,
  Q8_0,
  Q4_0,
  Q4_1,
  Q4_K,
  Q5_K,
  Q6_K,
  AFFINE4_G32,
  AFFINE4_G64,
  AFFINE4_G128,
  AFFINE8_G32,
  AFFINE8_G64,
  AFFINE8_G128,
};

inline constexpr int kNumDTypes = int(DType::AFFINE8_G128) + 1;

struct DTypeInfo {
  std::string_view name;
  int block_elems;  // elements per block (1 for plain types)
  int block_bytes;  // bytes per block
  bool quantized;
};

constexpr DTypeInfo dtype_info(DType t) {
  switch (t) {
    case DType::F32: return {"f32", 1, 4, false};
    case DType::F16: return {"f16", 1, 2, false};
    case DType::BF16: return {"bf16", 1, 2, false};
    case DType::I32: return {"i32", 1, 4, false};
    case DType::Q8_0: return {"q8_0", 32, 34, true};
    case DType::Q4_0: return {"q4_0", 32, 18, true};
    case DType::Q4_1: return {"q4_1", 32, 20, true};
    case DType::Q4_K: return {"q4_k", 256, 144, true};
    case DType::Q5_K: return {"q5_k", 256, 176, true};
    case DType::Q6_K: return {"q6_k", 256, 210, true};
    case DType::AFFINE4_G32: return {"affine4_g32", 32, 8 + 16, true};
    case DType::AFFINE4_G64: return {"affine4_g64", 64, 8 + 32, true};
    case DType::AFFINE4_G128: return {"affine4_g128", 128, 8 + 64, true};
    case DType::AFFINE8_G32: return {"affine8_g32", 32, 8 + 32, true};
    case DType::AFFINE8_G64: return {"affine8_g64", 64, 8 + 64, true};
    case DType::AFFINE8_G128: return {"affine8_g128", 128, 8 + 128, true};
  }
  return {"?", 1, 1, false};
}

constexpr std::string_view dtype_name(DType t) { return dtype_info(t).name; }

// Bytes needed for one row of `n` elements (n must be a multiple of the block).
constexpr size_t row_bytes(DType t, int64_t n) {
  auto info = dtype_info(t);
  return size_t(n / info.block_elems) * size_t(info.block_bytes);
}

// Parse a dtype name as printed by dtype_name ("q4_k", "bf16", ...).
bool parse_dtype(std::string_view name, DType* out);

// MLX affine dtype for (bits, group size), or false when unsupported.
bool affine_dtype(int bits, int group_size, DType* out);

// Bits of q of an MLX affine type (its group size is block_elems); 0 for
// every other type.
constexpr int affine_bits(DType t) {
  switch (t) {
    case DType::AFFINE4_G32:
    case DType::AFFINE4_G64:
    case DType::AFFINE4_G128: return 4;
    case DType::AFFINE8_G32:
    case DType::AFFINE8_G64:
    case DType::AFFINE8_G128: return 8;
    default: return 0;
  }
}

}  // namespace brioche
