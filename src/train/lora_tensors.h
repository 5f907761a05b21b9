// Tensor helpers shared by the LoRA adapter readers and writers
// (train/adapter_io.cpp for PEFT folders, train/adapter_gguf.cpp for
// llama.cpp's GGUF LoRA files).
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor.h"
#include "train/lora.h"

namespace brioche::train {

// A CPU f32 copy of a [rows, cols] tensor of any dtype (quantized rows dequantized).
Tensor copy_f32(const Tensor& t);

// copy_f32 of an adapter file's LoRA factor, refused with `file` and the
// tensor's name when its dtype holds no numbers (i32) or a value is not
// finite: a NaN factor would make every request of the adapter fail at its
// first sampled token.
Tensor factor_f32(const Tensor& t, const std::string& file, const std::string& name);

// Whether a projection's rows are per-head (Q, K), the ones llama.cpp's
// converter interleaves for RoPE in "llama" GGUF files.
bool permuted_module(Module m);

// llama.cpp's tensor name of a projection's weight: "blk.<layer>.attn_q.weight", ...
std::string gguf_weight_name(int layer, Module m);

// Reorders the rows of b (a [out, r] lora_B of Q or K) between GGUF's
// interleaved order and Hugging Face's (to_hf) or back.
Tensor reorder_rows(const Tensor& b, int head_dim, bool to_hf);

}  // namespace brioche::train
