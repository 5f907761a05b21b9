#include "train/lora_linear.h"

#include "ops/add.h"
#include "ops/device.h"
#include "ops/fused_matmul.h"
#include "ops/matmul.h"
#include "ops/scaled_add.h"

namespace brioche::train {

namespace {

// Buffers live on the device of the activations (the CPU or the GPU).
Tensor f32(int64_t n, int64_t d, Device device) { return ops::zeros(DType::F32, {n, d}, device); }

}  // namespace

void lora_linear_forward(const LoraSite& site, const Tensor& x, Tensor& y, Tensor* u) {
  ops::matmul(x, *site.weight, y);
  if (site.bias && site.bias->defined()) ops::add_bias(y, *site.bias);
  if (!site.lora) return;
  const Device dev = x.device();
  const int64_t n = x.dim(0);
  const auto& f = *site.lora;
  Tensor x_in = x;
  if (site.dropout.active()) {
    x_in = f32(n, x.dim(1), dev);
    ops::dropout(x, site.dropout, x_in);
  }
  ops::matmul(x_in, f.a, *u);   // drop(x)·Aᵀ             [n, r]
  ops::scale(*u, site.scale);   // u = s·drop(x)·Aᵀ       (saved)
  // y += u·Bᵀ (the scratch is used only where the op runs as matmul + add: the CPU)
  Tensor scratch = dev == Device::CPU ? f32(n, y.dim(1), dev) : Tensor();
  ops::matmul_accumulate(*u, f.b, y, scratch);
}

void lora_linear_backward(const LoraSite& site, const LoraLinearBackward& a) {
  ops::matmul_input_grad(a.dy, *site.weight, a.dx, a.dx_mode);  // dx (=|+=) dy·W
  if (!site.lora) return;
  auto& f = *site.lora;
  const Device dev = a.dy.device();
  const int64_t n = a.x.dim(0), r = f.a.dim(0);
  ops::matmul_weight_grad(a.dy, a.u, f.grad_b);                       // dB += dyᵀ·u
  Tensor g = f32(n, r, dev);
  ops::matmul_input_grad(a.dy, f.b, g, ops::GradWrite::Overwrite);
  ops::scale(g, site.scale);                                          // g = s·dy·B   [n, r]
  if (!site.dropout.active()) {
    ops::matmul_weight_grad(g, a.x, f.grad_a);                            // dA += gᵀ·x
    ops::matmul_input_grad(g, f.a, a.dx, ops::GradWrite::Accumulate);     // dx += g·A
    return;
  }
  Tensor xd = f32(n, a.x.dim(1), dev);
  ops::dropout(a.x, site.dropout, xd);
  ops::matmul_weight_grad(g, xd, f.grad_a);                               // dA += gᵀ·drop(x)
  Tensor gx = xd;                                                         // (xd is no longer needed)
  ops::matmul_input_grad(g, f.a, gx, ops::GradWrite::Overwrite);
  ops::dropout(gx, site.dropout, gx);                                    // drop' = same mask
  ops::add_scaled(gx, 1.0f, a.dx);
}

}  // namespace brioche::train
