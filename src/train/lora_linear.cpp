#include "train/lora_linear.h"

#include "core/thread_pool.h"
#include "ops/add.h"
#include "ops/matmul.h"

namespace brioche::train {

namespace {

// y += s · t, row by row
void add_scaled(Tensor& y, const Tensor& t, float s) {
  const int64_t n = y.dim(0), m = y.dim(1);
  ThreadPool::global().parallel_for(n, 8, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      float* out = y.row_as<float>(r);
      const float* in = t.row_as<float>(r);
      for (int64_t c = 0; c < m; ++c) out[c] += s * in[c];
    }
  });
}

void scale_in_place(Tensor& t, float s) {
  for (int64_t r = 0; r < t.dim(0); ++r) {
    float* row = t.row_as<float>(r);
    for (int64_t c = 0; c < t.dim(1); ++c) row[c] *= s;
  }
}

}  // namespace

void lora_linear_forward(const LoraSite& site, const Tensor& x, Tensor& y, Tensor* u) {
  ops::matmul(x, *site.weight, y);
  if (site.bias && site.bias->defined()) ops::add_bias(y, *site.bias);
  if (!site.lora) return;
  const int64_t n = x.dim(0);
  const auto& f = *site.lora;
  Tensor x_in = x;
  if (site.dropout.active()) {
    x_in = Tensor::zeros(DType::F32, {n, x.dim(1)});
    apply_dropout(site.dropout, x, x_in);
  }
  ops::matmul(x_in, f.a, *u);                          // u = drop(x)·Aᵀ   [n, r]
  Tensor low = Tensor::zeros(DType::F32, {n, y.dim(1)});
  ops::matmul(*u, f.b, low);                           // u·Bᵀ             [n, out]
  add_scaled(y, low, site.scale);
}

void lora_linear_backward(const LoraSite& site, const LoraLinearBackward& a) {
  ops::matmul_input_grad(a.dy, *site.weight, a.dx, a.dx_mode);  // dx (=|+=) dy·W
  if (!site.lora) return;
  auto& f = *site.lora;
  const int64_t n = a.x.dim(0), r = f.a.dim(0);
  // dB += dyᵀ·(s·u)
  Tensor su = Tensor::zeros(DType::F32, {n, r});
  add_scaled(su, a.u, site.scale);
  ops::matmul_weight_grad(a.dy, su, f.grad_b);
  // g = s · dy·B
  Tensor g = Tensor::zeros(DType::F32, {n, r});
  ops::matmul_input_grad(a.dy, f.b, g, ops::GradWrite::Overwrite);
  scale_in_place(g, site.scale);
  if (!site.dropout.active()) {
    ops::matmul_weight_grad(g, a.x, f.grad_a);                            // dA += gᵀ·x
    ops::matmul_input_grad(g, f.a, a.dx, ops::GradWrite::Accumulate);     // dx += g·A
    return;
  }
  Tensor xd = Tensor::zeros(DType::F32, {n, a.x.dim(1)});
  apply_dropout(site.dropout, a.x, xd);
  ops::matmul_weight_grad(g, xd, f.grad_a);                               // dA += gᵀ·drop(x)
  Tensor gx = Tensor::zeros(DType::F32, {n, a.x.dim(1)});
  ops::matmul_input_grad(g, f.a, gx, ops::GradWrite::Overwrite);
  apply_dropout(site.dropout, gx, gx);                                    // drop' = same mask
  add_scaled(a.dx, gx, 1.0f);
}

}  // namespace brioche::train
