#include "ops/lora_matmul.h"

#include <vector>

#include "backend/cpu/linear_backward.h"
#include "core/error.h"
#include "ops/amx_weight_tiles.h"
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

// Scratch written whole by the op that fills it.
Tensor f32(int64_t n, int64_t d, Device device) { return uninitialized(DType::F32, {n, d}, device); }

// mᵀ of an f32 matrix on the CPU (a LoRA factor: a few thousand floats).
Tensor transposed(const Tensor& m) {
  const detail::F32Rows rows = detail::f32_rows(m, "lora_matmul", "factor");
  Tensor t = uninitialized(DType::F32, {rows.dim, rows.n_rows}, Device::CPU);
  float* dst = t.data_as<float>();
  for (int64_t r = 0; r < rows.n_rows; ++r)
    for (int64_t c = 0; c < rows.dim; ++c) dst[c * rows.n_rows + r] = rows.data[r * rows.stride + c];
  return t;
}

// Checks the factors against a projection with `in` inputs and `out` outputs.
void check_low_rank(const LowRank& lr, int64_t in, int64_t out, std::string_view op) {
  const detail::F32Rows a = detail::f32_rows(lr.a, op, "lora A");
  const detail::F32Rows b = detail::f32_rows(lr.b, op, "lora B");
  BRIOCHE_CHECK(a.dim == in && a.stride == in && b.n_rows == out && b.dim == a.n_rows && b.stride == b.dim, op,
                ": LoRA factors must be A [r, ", in, "] and B [", out, ", r], contiguous; got A ", lr.a.describe(),
                " and B ", lr.b.describe());
}

// x's (or dy's) rows as f32 (the f32 path's view), or checked as dense bf16
// where the tensor-core path takes it as it is.
detail::F32Rows rows_of(const Tensor& t, int64_t n, int64_t d, bool bf16_ok, std::string_view op,
                        std::string_view what) {
  BRIOCHE_CHECK(bf16_ok || !detail::is_bf16(t), op, ": bf16 ", what, " ", t.describe(),
                " needs the tensor-core "
                "path (CUDA, more than 8 rows, bf16 or quantized weights, widths multiples of 8)");
  const detail::F32Rows r = detail::f32_or_bf16_rows(t, n, d, op, what);
  BRIOCHE_CHECK(r.n_rows == n && r.dim == d, op, ": ", what, " must be [", n, ", ", d, "], got ", t.describe());
  return r;
}

// A required f32 [n, d] operand (u, the factor gradients, dx).
void check_rows(const Tensor* t, int64_t n, int64_t d, std::string_view op, std::string_view what) {
  BRIOCHE_CHECK(t != nullptr, op, ": ", what, " is required with LoRA factors");
  rows_of(*t, n, d, false, op, what);
}

// The checked y = x·Wᵀ arguments of a part. A bf16 x has no f32 rows to
// point at (the tensor-core path reads it as given): an f32 view of its
// shape and device, without data, stands in for the checks.
cpu::MatmulArgs part_args(const Tensor& x, const Tensor& w, const Tensor& y) {
  if (x.dtype() != DType::BF16) return detail::matmul_args(x, w, y, "lora_matmul");
  const Tensor shape_of_x = Tensor::view(nullptr, DType::F32, {x.dim(0), x.dim(1)}, nullptr, x.device());
  return detail::matmul_args(shape_of_x, w, y, "lora_matmul");
}

#if BRIOCHE_CUDA
const void* bf16_data(const Tensor& t) { return detail::is_bf16(t) ? t.data() : nullptr; }

cuda::LowRankArgs low_rank_args(const LowRank* lr) {
  if (lr == nullptr) return {};
  return {.a = lr->a.data_as<float>(), .b = lr->b.data_as<float>(), .r = lr->a.dim(0), .scale = lr->scale};
}
#endif

}  // namespace

bool lora_matmul_on_tensor_cores(Device device, int64_t n, int64_t in, std::span<const Tensor* const> weights) {
#if BRIOCHE_CUDA
  if (device != Device::CUDA || n <= 8 || in % 8 != 0) return false;
  for (const Tensor* w : weights)
    if (w->dtype() == DType::F32 || w->dtype() == DType::F16 || w->dim(0) % 8 != 0) return false;
  return true;
#else
  (void)device, (void)n, (void)in, (void)weights;
  return false;
#endif
}

void lora_matmul(const Tensor& x, std::span<const LoraMatmulPart> parts) {
  for (const LoraMatmulPart& p : parts) {
    p.y.note_written();
    if (p.u != nullptr) p.u->note_written();
  }
  BRIOCHE_CHECK(!parts.empty() && parts.size() <= 3, "lora_matmul: 1 to 3 projections, got ", parts.size());
  BRIOCHE_CHECK(x.defined() && x.rank() == 2, "lora_matmul: x must be a matrix, got ",
                x.defined() ? x.describe() : std::string("undefined"));
  std::vector<const Tensor*> weights;
  for (const LoraMatmulPart& p : parts) weights.push_back(&p.w);
  const bool tensor_cores = lora_matmul_on_tensor_cores(x.device(), x.dim(0), x.dim(1), weights);
  rows_of(x, x.dim(0), x.dim(1), tensor_cores, "lora_matmul", "x");
  std::vector<cpu::MatmulArgs> base;  // (checks x's shape, w and y)
  for (const LoraMatmulPart& p : parts) {
    base.push_back(part_args(x, p.w, p.y));
    if (p.low_rank) {
      check_low_rank(*p.low_rank, x.dim(1), p.w.dim(0), "lora_matmul");
      check_rows(p.u, x.dim(0), p.low_rank->a.dim(0), "lora_matmul", "u");
      detail::common_device("lora_matmul", {&x, &p.low_rank->a, &p.low_rank->b, p.u});
    }
  }
#if BRIOCHE_CUDA
  if (tensor_cores) {
    std::vector<cuda::LoraMatmulPartArgs> args;
    for (size_t i = 0; i < parts.size(); ++i) {
      const LoraMatmulPart& p = parts[i];
      args.push_back({.base = base[i],
                      .low_rank = low_rank_args(p.low_rank),
                      .u = p.u ? p.u->data_as<float>() : nullptr,
                      .ld_u = p.u ? p.u->stride(0) / 4 : 0});
    }
    return cuda::lora_matmul(args, bf16_data(x));
  }
#endif
  for (size_t i = 0; i < parts.size(); ++i) {
    const LoraMatmulPart& p = parts[i];
    // A quantized base on a CPU with AMX: bf16 tiles with f32 sums, as the
    // backward's input gradient (backend/cpu/linear_backward.h); otherwise
    // cpu::matmul (8-bit activations for quantized weights).
    const bool amx = x.device() == Device::CPU && training_matmul_on_amx(p.w, base[i]);
    if (!amx) matmul(x, p.w, p.y);
    if (!p.low_rank) continue;
    if (x.device() == Device::CPU) {
      // The low-rank products through the factors' transposes as matmul_input_grad
      // runs them (register panels over rows of x): ops::matmul's f32 path is a
      // decode kernel of dot products, and u·Bᵀ's are r = 16 long (~10% of a
      // CPU ORPO step on SmolLM2-135M went there).
      matmul_input_grad(x, transposed(p.low_rank->a), *p.u, GradWrite::Overwrite);     // x·Aᵀ   [n, r]
      scale(*p.u, p.low_rank->scale);                                                  // u = s·x·Aᵀ
      matmul_input_grad(*p.u, transposed(p.low_rank->b), p.y, GradWrite::Accumulate);  // y += u·Bᵀ
      continue;
    }
    matmul(x, p.low_rank->a, *p.u);  // x·Aᵀ            [n, r]
    scale(*p.u, p.low_rank->scale);  // u = s·x·Aᵀ
    // y += u·Bᵀ (the scratch is used only where the op runs as matmul + add: the CPU)
    Tensor scratch = x.device() == Device::CPU ? f32(x.dim(0), p.y.dim(1), Device::CPU) : Tensor();
    matmul_accumulate(*p.u, p.low_rank->b, p.y, scratch);
  }
}

void lora_matmul_backward(const Tensor& x, std::span<const LoraMatmulGradPart> parts, Tensor& dx, GradWrite mode) {
  BRIOCHE_CHECK(!parts.empty() && parts.size() <= 3, "lora_matmul_backward: 1 to 3 projections, got ", parts.size());
  BRIOCHE_CHECK(x.defined() && x.rank() == 2, "lora_matmul_backward: x must be a matrix, got ",
                x.defined() ? x.describe() : std::string("undefined"));
  std::vector<const Tensor*> weights;
  for (const LoraMatmulGradPart& p : parts) {
    BRIOCHE_CHECK(p.w.defined() && p.w.rank() == 2, "lora_matmul_backward: weight must be a matrix, got ",
                  p.w.defined() ? p.w.describe() : std::string("undefined"));
    weights.push_back(&p.w);
  }
  const bool tensor_cores = lora_matmul_on_tensor_cores(x.device(), x.dim(0), x.dim(1), weights);
  const detail::F32Rows xs = rows_of(x, x.dim(0), x.dim(1), tensor_cores, "lora_matmul_backward", "x");
  check_rows(&dx, xs.n_rows, xs.dim, "lora_matmul_backward", "dx");
  for (const LoraMatmulGradPart& p : parts) {
    BRIOCHE_CHECK(p.w.dim(1) == xs.dim, "lora_matmul_backward: weight ", p.w.describe(), " does not take x ",
                  x.describe());
    rows_of(p.dy, xs.n_rows, p.w.dim(0), tensor_cores, "lora_matmul_backward", "dy");
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
  }
#if BRIOCHE_CUDA
  if (tensor_cores) {
    std::vector<cuda::LoraMatmulGradPartArgs> args;
    for (const LoraMatmulGradPart& p : parts) {
      const detail::F32Rows g = rows_of(p.dy, xs.n_rows, p.w.dim(0), true, "lora_matmul_backward", "dy");
      const detail::F32Rows d = detail::f32_rows(dx, "lora_matmul_backward", "dx");
      args.push_back({.base = {.dy = g.data,
                               .wtype = p.w.dtype(),
                               .w = p.w.data(),
                               .w_row_bytes = size_t(p.w.stride(0)),
                               .dx = d.data,
                               .ld_dy = g.stride,
                               .ld_dx = d.stride,
                               .n = g.n_rows,
                               .m = g.dim,
                               .k = d.dim,
                               .accumulate = mode == GradWrite::Accumulate},
                      .low_rank = low_rank_args(p.low_rank),
                      .u = p.u ? p.u->data_as<float>() : nullptr,
                      .ld_u = p.u ? p.u->stride(0) / 4 : 0,
                      .grad_a = p.grad_a ? p.grad_a->data_as<float>() : nullptr,
                      .grad_b = p.grad_b ? p.grad_b->data_as<float>() : nullptr,
                      .dy16 = bf16_data(p.dy)});
    }
    return cuda::lora_matmul_backward(xs.data, xs.stride, args, bf16_data(x));
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
    scale(g, p.low_rank->scale);                                     // g = s·dy·B   [n, r]
    matmul_weight_grad(g, x, *p.grad_a);                             // dA += gᵀ·x
    matmul_input_grad(g, p.low_rank->a, dx, GradWrite::Accumulate);  // dx += g·A
  }
}

}  // namespace brioche::ops
