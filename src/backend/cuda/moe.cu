// The mixture-of-experts block's kernels on CUDA (ops/moe.h): the expert
// matmul of decode rows (each (row, expert) pair's GEMV in one launch,
// reading only the chosen experts' weights) and the per-row weighting of
// expert outputs, and the routing of decode rows on the device
// (moe_route_pairs: expert ids and weights that the expert matmul and the
// weighting read there, so a decode step needs no host round trip). The
// expert loop of larger batches routes on the host (ops::moe_route reads
// the router logits back: it needs the expert ids there to pick each
// expert's weights).
#include <cmath>
#include <cstdint>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemma_kernels.h"
#include "backend/cuda/quant_decode.cuh"
#include "backend/cuda/runtime.h"
#include "core/error.h"

namespace brioche::cuda {

namespace {

__global__ void scale_rows_kernel(backend::cpu::ScaleRowsArgs a) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= a.dim) return;
  for (int64_t r = blockIdx.y; r < a.n_rows; r += gridDim.y) a.x[r * a.x_stride + c] *= a.scale[r];
}

constexpr int kExpertWarps = 4;  // output values (warps) per CTA

// One warp per row; lane i holds experts i, i + 32, ... The CPU kernel's
// arithmetic: p = exp(z − max) / Σ exp(z − max) (the sum over lanes in a
// butterfly, so its last bits may differ from the CPU's serial sum), top_k
// rounds of a warp argmax (larger p first, equal p: the lower expert), the
// chosen p summed in that order, weight = p / top_sum · scale. Lane 0 then
// writes the row's pairs in ascending expert order.
constexpr int kRouteMaxTopK = 32;

__global__ void moe_route_pairs_kernel(MoeRoutePairsArgs a, const float* scale) {
  const int64_t r = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = int(threadIdx.x % 32);
  if (r >= a.n_rows) return;
  const float* z = a.logits + r * a.logits_stride;
  float zmax = -INFINITY;
  for (int e = lane; e < a.n_experts; e += 32) zmax = fmaxf(zmax, z[e]);
#pragma unroll
  for (int o = 16; o > 0; o /= 2) zmax = fmaxf(zmax, __shfl_xor_sync(0xffffffffu, zmax, o));
  float sum = 0.0f;
  for (int e = lane; e < a.n_experts; e += 32) sum += expf(z[e] - zmax);
#pragma unroll
  for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  int chosen_e[kRouteMaxTopK];
  float chosen_p[kRouteMaxTopK];
  float top_sum = 0.0f;
  for (int k = 0; k < a.top_k; ++k) {
    // The best expert not chosen yet: each lane's best, then across lanes.
    float best_p = -1.0f;
    int best_e = a.n_experts;
    for (int e = lane; e < a.n_experts; e += 32) {
      bool taken = false;
      for (int j = 0; j < k; ++j) taken = taken || chosen_e[j] == e;
      const float p = expf(z[e] - zmax) / sum;
      if (!taken && (p > best_p || (p == best_p && e < best_e))) best_p = p, best_e = e;
    }
#pragma unroll
    for (int o = 16; o > 0; o /= 2) {
      const float other_p = __shfl_xor_sync(0xffffffffu, best_p, o);
      const int other_e = __shfl_xor_sync(0xffffffffu, best_e, o);
      if (other_p > best_p || (other_p == best_p && other_e < best_e)) best_p = other_p, best_e = other_e;
    }
    // Non-finite logits (a padding row's) choose nothing above: take expert
    // 0 at weight 0, so no pair reads outside the experts.
    if (best_e >= a.n_experts) best_e = 0, best_p = 0.0f;
    chosen_e[k] = best_e;
    chosen_p[k] = best_p;
    top_sum += best_p;
  }
  if (lane != 0) return;
  // Ascending expert order (top_k is small: insertion sort).
  for (int i = 1; i < a.top_k; ++i)
    for (int j = i; j > 0 && chosen_e[j - 1] > chosen_e[j]; --j) {
      const int e = chosen_e[j];
      chosen_e[j] = chosen_e[j - 1], chosen_e[j - 1] = e;
      const float p = chosen_p[j];
      chosen_p[j] = chosen_p[j - 1], chosen_p[j - 1] = p;
    }
  for (int k = 0; k < a.top_k; ++k) {
    a.expert[r * a.top_k + k] = chosen_e[k];
    a.weight[r * a.top_k + k] = chosen_p[k] / top_sum * scale[chosen_e[k]];
  }
}

// blockIdx.y: the pair; warp w of CTA x: output value x·4 + w. Dense
// weights: lane i takes elements i, i + 32, ... (any k); quantized: lane i
// decodes chunks i, i + 32, ... of 32 values (k a multiple of 32).
template <DType T>
__global__ void __launch_bounds__(kExpertWarps * 32)
    expert_matmul_kernel(ExpertMatmulArgs a, const int32_t* x_rows, const int32_t* expert) {
  const int64_t p = blockIdx.y;
  const int64_t j = int64_t(blockIdx.x) * kExpertWarps + threadIdx.x / 32;
  const int lane = int(threadIdx.x % 32);
  if (j >= a.m) return;
  const float* x = a.x + int64_t(x_rows[p]) * a.ldx;
  const uint8_t* row =
      static_cast<const uint8_t*>(a.w) + size_t(expert[p]) * a.expert_bytes + size_t(j) * a.w_row_bytes;
  float sum = 0.0f;
  if constexpr (T == DType::F32 || T == DType::F16 || T == DType::BF16) {
    for (int64_t i = lane; i < a.k; i += 32) {
      float w;
      if constexpr (T == DType::F32)
        w = reinterpret_cast<const float*>(row)[i];
      else if constexpr (T == DType::F16)
        w = __half2float(reinterpret_cast<const __half*>(row)[i]);
      else
        w = __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(row)[i]);
      sum += w * x[i];
    }
  } else {
    float v[32];
    for (int64_t c = lane; c < a.k / 32; c += 32) {
      detail::Decoder<T>::chunk(row, c, v);
#pragma unroll
      for (int i = 0; i < 32; ++i) sum += v[i] * x[c * 32 + i];
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (lane == 0) a.y[p * a.ldy + j] = sum;
}

}  // namespace

void expert_matmul(const ExpertMatmulArgs& a) {
  if (a.n_pairs == 0 || a.m == 0) return;
  const bool dense = a.wtype == DType::F32 || a.wtype == DType::F16 || a.wtype == DType::BF16;
  BRIOCHE_CHECK(dense || a.k % 32 == 0, "expert_matmul (cuda): ", dtype_name(a.wtype), " experts need k a multiple of ",
                "32, got ", a.k);
  BRIOCHE_CHECK(a.n_pairs <= 65535, "expert_matmul (cuda): ", a.n_pairs, " pairs, at most 65,535 a launch");
  // Both index lists in one upload (cached by content), or the rows alone
  // when the experts are on the device.
  std::vector<int32_t> meta(a.x_rows, a.x_rows + a.n_pairs);
  if (a.device_expert == nullptr) meta.insert(meta.end(), a.expert, a.expert + a.n_pairs);
  const auto* d = static_cast<const int32_t*>(upload_cached(meta.data(), meta.size() * sizeof(int32_t)));
  const int32_t* expert = a.device_expert != nullptr ? a.device_expert : d + a.n_pairs;
  const dim3 grid(unsigned((a.m + kExpertWarps - 1) / kExpertWarps), unsigned(a.n_pairs), 1);
  const bool launched = detail::visit_decodable(a.wtype, [&]<DType T>() {
    expert_matmul_kernel<T><<<grid, kExpertWarps * 32, 0, detail::current_stream()>>>(a, d, expert);
  });
  BRIOCHE_CHECK(launched, "expert_matmul (cuda): weights of ", dtype_name(a.wtype), " are not a matmul weight type");
  CUDA_CHECK_LAUNCH();
}

void scale_rows(const backend::cpu::ScaleRowsArgs& a) {
  if (a.n_rows == 0 || a.dim == 0) return;
  backend::cpu::ScaleRowsArgs d = a;
  d.scale = static_cast<const float*>(upload_cached(a.scale, size_t(a.n_rows) * sizeof(float)));
  const dim3 grid(unsigned((a.dim + 255) / 256), unsigned(a.n_rows < 65535 ? a.n_rows : 65535), 1);
  scale_rows_kernel<<<grid, 256, 0, detail::current_stream()>>>(d);
  CUDA_CHECK_LAUNCH();
}

void scale_rows_device(const backend::cpu::ScaleRowsArgs& a) {
  if (a.n_rows == 0 || a.dim == 0) return;
  const dim3 grid(unsigned((a.dim + 255) / 256), unsigned(a.n_rows < 65535 ? a.n_rows : 65535), 1);
  scale_rows_kernel<<<grid, 256, 0, detail::current_stream()>>>(a);
  CUDA_CHECK_LAUNCH();
}

void moe_route_pairs(const MoeRoutePairsArgs& a) {
  if (a.n_rows == 0) return;
  BRIOCHE_CHECK(a.top_k >= 1 && a.top_k <= kRouteMaxTopK && a.top_k <= a.n_experts, "moe_route_pairs (cuda): top_k ",
                a.top_k, " outside 1..", kRouteMaxTopK, " or past ", a.n_experts, " experts");
  const auto* scale = static_cast<const float*>(upload_cached(a.per_expert_scale, size_t(a.n_experts) * sizeof(float)));
  constexpr int kRowsPerBlock = 4;
  moe_route_pairs_kernel<<<unsigned((a.n_rows + kRowsPerBlock - 1) / kRowsPerBlock), kRowsPerBlock * 32, 0,
                           detail::current_stream()>>>(a, scale);
  CUDA_CHECK_LAUNCH();
}

}  // namespace brioche::cuda
