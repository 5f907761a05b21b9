#include "train/lora_tensors.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/finite.h"
#include "ops/quantize.h"

namespace brioche::train {

namespace {

// Row r of an interleaved (GGUF llama) head-major matrix <-> Hugging Face row:
// GGUF row h·d + 2i + s  holds HF row h·d + s·d/2 + i.
int64_t hf_row_of_gguf_row(int64_t r, int head_dim) {
  const int64_t h = r / head_dim, within = r % head_dim, i = within / 2, s = within % 2;
  return h * head_dim + s * (head_dim / 2) + i;
}

}  // namespace

bool permuted_module(Module m) { return m == Module::Q || m == Module::K; }

std::string gguf_weight_name(int layer, Module m) {
  static constexpr const char* kNames[kLlamaModules] = {"attn_q",   "attn_k", "attn_v",  "attn_output",
                                                        "ffn_gate", "ffn_up", "ffn_down"};
  BRIOCHE_CHECK(int(m) < kLlamaModules, "GGUF LoRA: no llama.cpp tensor name for ", module_name(m), " (layer ", layer,
                "); Qwen 3.5's linear-attention adapters stay in the PEFT layout");
  return "blk." + std::to_string(layer) + "." + kNames[size_t(m)] + ".weight";
}

Tensor copy_f32(const Tensor& t) {
  Tensor out = Tensor::zeros(DType::F32, {t.dim(0), t.dim(1)});
  for (int64_t r = 0; r < t.dim(0); ++r) {
    if (t.dtype() == DType::F32) {
      std::memcpy(out.row_ptr(r), t.row_ptr(r), size_t(t.dim(1)) * 4);
    } else {
      ops::dequantize_row(t.dtype(), t.row_ptr(r), out.row_as<float>(r), t.dim(1));
    }
  }
  return out;
}

Tensor factor_f32(const Tensor& t, const std::string& file, const std::string& name) {
  const DTypeInfo info = dtype_info(t.dtype());
  BRIOCHE_CHECK(t.dtype() == DType::F32 || t.dtype() == DType::F16 || t.dtype() == DType::BF16 || info.quantized, file,
                ": tensor '", name, "' expected float values (f32, f16, bf16 or a quantized type), found ", info.name);
  Tensor out = copy_f32(t);
  const std::span<const float> v(out.data_as<float>(), size_t(out.numel()));
  if (const auto i = first_non_finite(v))
    fail(file, ": tensor '", name, "' expected finite values, found ", v[size_t(*i)], " at element ", *i);
  return out;
}

// Reorders the rows of b (a [out, r] lora_B) between GGUF and HF order.
Tensor reorder_rows(const Tensor& b, int head_dim, bool to_hf) {
  Tensor out = Tensor::zeros(DType::F32, {b.dim(0), b.dim(1)});
  for (int64_t r = 0; r < b.dim(0); ++r) {
    const int64_t hf = hf_row_of_gguf_row(r, head_dim);
    const int64_t src = to_hf ? r : hf, dst = to_hf ? hf : r;
    std::memcpy(out.row_ptr(dst), b.row_ptr(src), size_t(b.dim(1)) * 4);
  }
  return out;
}

}  // namespace brioche::train
