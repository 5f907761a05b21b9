#include "ops/lora_matmul.h"

#include <vector>

#include "core/error.h"
#include "ops/check_f32.h"
#include "ops/device.h"
#include "ops/fused_matmul.h"
#include "ops/matmul.h"
#include "ops/matmul_args.h"
#include "ops/scaled_add.h"
#if BRIOCHE_CUDA
#include "backend/cuda/train_kernels.h"
#endif

namespace brioche::ops {

namespace {

Tensor f32(int64_t n, int64_t d, Device device) { return zeros(DType::F32, {n, d}, device); }

// Checks the factors against a projection with `in` inputs and `out` outputs.
void check_low_rank(const LowRank& lr, int64_t in, int64_t out, std::string_view op) {
  const detail::F32Rows a = detail::f32_rows(lr.a, op, "lora A");
  const detail::F32Rows b = detail::f32_rows(lr.b, op, "lora B");
  BRIOCHE_CHECK(a.dim == in && a.stride == in && b.n_rows == out && b.dim == a.n_rows && b.stride == b.dim, op,
                ": LoRA factors must be A [r, ", in, "] and B [", out, ", r], contiguous; got A ", lr.a.describe(),
                " and B ", lr.b.describe());
}

void check_rows(const Tensor* t, int64_t n, int64_t d, std::string_view op, std::string_view what) {
  BRIOCHE_CHECK(t != nullptr, op, ": ", what, " is required with LoRA factors");
  const detail::F32Rows r = detail::f32_rows(*t, op, what);
  BRIOCHE_CHECK(r.n_rows == n && r.dim == d, op, ": ", what, " must be [", n, ", ", d, "], got ", t->describe());
}

#if BRIOCHE_CUDA
// The fused tensor-core path (lora_matmul.h): many rows, a weight the GEMMs
// read as bf16 (bf16 itself or quantized), widths cuBLASLt's bf16 kernels
// take as leading dimensions.
bool fused_on_cuda(const Tensor& x, std::span<const Tensor* const> weights) {
  if (x.device() != Device::CUDA || x.dim(0) <= 8 || x.dim(1) % 8 != 0) return false;
  for (const Tensor* w : weights)
    if (w->dtype() == DType::F32 || w->dtype() == DType::F16 || w->dim(0) % 8 != 0) return false;
  return true;
}

cuda::LowRankArgs low_rank_args(const LowRank* lr) {
  if (lr == nullptr) return {};
  return {.a = lr->a.data_as<float>(), .b = lr->b.data_as<float>(), .r = lr->a.dim(0), .scale = lr->scale};
}
#endif

}  // namespace

void lora_matmul(const Tensor& x, std::span<const LoraMatmulPart> parts) {
  BRIOCHE_CHECK(!parts.empty() && parts.size() <= 3, "lora_matmul: 1 to 3 projections, got ", parts.size());
  std::vector<const Tensor*> weights;
  std::vector<cpu::MatmulArgs> base;  // (checks x, w and y)
  for (const LoraMatmulPart& p : parts) {
    base.push_back(detail::matmul_args(x, p.w, p.y, "lora_matmul"));
    if (p.low_rank) {
      check_low_rank(*p.low_rank, x.dim(1), p.w.dim(0), "lora_matmul");
      check_rows(p.u, x.dim(0), p.low_rank->a.dim(0), "lora_matmul", "u");
      detail::common_device("lora_matmul", {&x, &p.low_rank->a, &p.low_rank->b, p.u});
    }
    weights.push_back(&p.w);
  }
#if BRIOCHE_CUDA
  if (fused_on_cuda(x, weights)) {
    std::vector<cuda::LoraMatmulPartArgs> args;
    for (size_t i = 0; i < parts.size(); ++i) {
      const LoraMatmulPart& p = parts[i];
      args.push_back({.base = base[i], .low_rank = low_rank_args(p.low_rank),
                      .u = p.u ? p.u->data_as<float>() : nullptr, .ld_u = p.u ? p.u->stride(0) / 4 : 0});
    }
    return cuda::lora_matmul(args);
  }
#endif
  for (const LoraMatmulPart& p : parts) {
    matmul(x, p.w, p.y);
    if (!p.low_rank) continue;
    matmul(x, p.low_rank->a, *p.u);  // x·Aᵀ            [n, r]
    scale(*p.u, p.low_rank->scale);  // u = s·x·Aᵀ
    // y += u·Bᵀ (the scratch is used only where the op runs as matmul + add: the CPU)
    Tensor scratch = x.device() == Device::CPU ? f32(x.dim(0), p.y.dim(1), Device::CPU) : Tensor();
    matmul_accumulate(*p.u, p.low_rank->b, p.y, scratch);
  }
}

void lora_matmul_backward(const Tensor& x, std::span<const LoraMatmulGradPart> parts, Tensor& dx, GradWrite mode) {
  BRIOCHE_CHECK(!parts.empty() && parts.size() <= 3, "lora_matmul_backward: 1 to 3 projections, got ", parts.size());
  const detail::F32Rows xs = detail::f32_rows(x, "lora_matmul_backward", "x");
  check_rows(&dx, xs.n_rows, xs.dim, "lora_matmul_backward", "dx");
  std::vector<const Tensor*> weights;
  for (const LoraMatmulGradPart& p : parts) {
    BRIOCHE_CHECK(p.w.defined() && p.w.rank() == 2 && p.w.dim(1) == xs.dim, "lora_matmul_backward: weight ",
                  p.w.describe(), " does not take x ", x.describe());
    check_rows(&p.dy, xs.n_rows, p.w.dim(0), "lora_matmul_backward", "dy");
    detail::common_device("lora_matmul_backward", {&x, &p.w, &p.dy, &dx});
    if (p.low_rank) {
      const int64_t r = p.low_rank->a.dim(0);
      check_low_rank(*p.low_rank, xs.dim, p.w.dim(0), "lora_matmul_backward");
      check_rows(p.u, xs.n_rows, r, "lora_matmul_backward", "u");
      check_rows(p.grad_a, r, xs.dim, "lora_matmul_backward", "grad A");
      check_rows(p.grad_b, p.w.dim(0), r, "lora_matmul_backward", "grad B");
      BRIOCHE_CHECK(p.grad_a->is_contiguous() && p.grad_b->is_contiguous(),
                    "lora_matmul_backward: factor gradients must be contiguous, got ", p.grad_a->describe(), " and ",
                    p.grad_b->describe());
      detail::common_device("lora_matmul_backward", {&x, &p.low_rank->a, &p.low_rank->b, p.u, p.grad_a, p.grad_b});
    }
    weights.push_back(&p.w);
  }
#if BRIOCHE_CUDA
  if (fused_on_cuda(x, weights)) {
    std::vector<cuda::LoraMatmulGradPartArgs> args;
    for (const LoraMatmulGradPart& p : parts) {
      const detail::F32Rows g = detail::f32_rows(p.dy, "lora_matmul_backward", "dy");
      const detail::F32Rows d = detail::f32_rows(dx, "lora_matmul_backward", "dx");
      args.push_back({.base = {.dy = g.data, .wtype = p.w.dtype(), .w = p.w.data(), .w_row_bytes = size_t(p.w.stride(0)),
                               .dx = d.data, .ld_dy = g.stride, .ld_dx = d.stride, .n = g.n_rows, .m = g.dim,
                               .k = d.dim, .accumulate = mode == GradWrite::Accumulate},
                      .low_rank = low_rank_args(p.low_rank),
                      .u = p.u ? p.u->data_as<float>() : nullptr, .ld_u = p.u ? p.u->stride(0) / 4 : 0,
                      .grad_a = p.grad_a ? p.grad_a->data_as<float>() : nullptr,
                      .grad_b = p.grad_b ? p.grad_b->data_as<float>() : nullptr});
    }
    return cuda::lora_matmul_backward(xs.data, xs.stride, args);
  }
#endif
  GradWrite write = mode;  // the first product honours `mode`, the rest add
  for (const LoraMatmulGradPart& p : parts) {
    matmul_input_grad(p.dy, p.w, dx, write);  // dx (=|+=) dy·W
    write = GradWrite::Accumulate;
    if (!p.low_rank) continue;
    matmul_weight_grad(p.dy, *p.u, *p.grad_b);  // dB += dyᵀ·u
    Tensor g = f32(xs.n_rows, p.low_rank->a.dim(0), x.device());
    matmul_input_grad(p.dy, p.low_rank->b, g, GradWrite::Overwrite);
    scale(g, p.low_rank->scale);                                    // g = s·dy·B   [n, r]
    matmul_weight_grad(g, x, *p.grad_a);                            // dA += gᵀ·x
    matmul_input_grad(g, p.low_rank->a, dx, GradWrite::Accumulate);  // dx += g·A
  }
}

}  // namespace brioche::ops
