// CUDA kernels of the ops Gemma 4 adds (ops/gelu_tanh.h, ops/softcap.h,
// ops/moe.h), taking the CPU backend's argument structs with device
// pointers for the tensors; host metadata (the per-row scales of
// scale_rows, the expert scales of the routing) is uploaded by the launchers. Asynchronous on cuda::stream().
// Plain C++ header: the kernels exist when BRIOCHE_CUDA=ON.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cpu/gemma_elementwise.h"
#include "backend/cpu/moe.h"
#include "core/dtype.h"

namespace brioche::cuda {

// out = gelu_tanh(gate) · up, the CPU kernel's f32 formula (tanhf).
void gelu_tanh_mul(const backend::cpu::GeluTanhMulArgs& args);
// x = cap · tanh(x / cap)
void softcap(const backend::cpu::SoftcapArgs& args);
// ops::expert_matmul: y[p] = x[x_rows[p]] · w[expert[p]]ᵀ for every pair in
// one launch, a warp per output value, each weight row read once per pair.
struct ExpertMatmulArgs {
  const float* x;  // [n_x, k], row stride ldx floats
  int64_t ldx;
  DType wtype;
  const void* w;                           // [n_experts, m, k] rows of wtype
  size_t expert_bytes;                     // between experts
  size_t w_row_bytes;                      // between rows of an expert
  const int32_t* x_rows;                   // [n_pairs] host
  const int32_t* expert;                   // [n_pairs] host (unless device_expert)
  const int32_t* device_expert = nullptr;  // [n_pairs] on the device, read instead of expert
  int64_t n_pairs, m, k;
  float* y;  // [n_pairs, m], row stride ldy floats
  int64_t ldy;
};
void expert_matmul(const ExpertMatmulArgs& args);
// x[r, :] *= scale[r]; args.scale is host memory [n_rows] (uploaded).
void scale_rows(const backend::cpu::ScaleRowsArgs& args);
// The same with args.scale in device memory.
void scale_rows_device(const backend::cpu::ScaleRowsArgs& args);
// ops::moe_route_pairs: a warp per row computes the CPU kernel's routing
// (backend/cpu/moe.cpp: softmax, top-k with ties to the lower expert,
// weights renormalised over the chosen and scaled per expert) and writes
// the row's pairs in ascending expert order.
struct MoeRoutePairsArgs {
  const float* logits;  // [n_rows, n_experts], row stride logits_stride floats
  int64_t logits_stride;
  const float* per_expert_scale;  // [n_experts] host (uploaded)
  int32_t* expert;                // [n_rows · top_k] out
  float* weight;                  // [n_rows · top_k] out
  int64_t n_rows;
  int n_experts, top_k;  // top_k ≤ 32
};
void moe_route_pairs(const MoeRoutePairsArgs& args);

}  // namespace brioche::cuda
