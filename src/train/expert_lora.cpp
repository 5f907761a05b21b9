#include "train/expert_lora.h"

#include "core/error.h"
#include "ops/device.h"
#include "ops/linear_backward.h"
#include "ops/matmul.h"
#include "ops/scaled_add.h"

namespace brioche::train {

namespace {

Tensor f32(int64_t n, int64_t d) { return ops::uninitialized(DType::F32, {n, d}, Device::CPU); }

int64_t rank_of(const ExpertLora& s) {
  const LoraFactors& f = *s.factors;
  BRIOCHE_CHECK(s.n_experts > 0 && s.expert >= 0 && s.expert < s.n_experts && f.a.dim(0) % s.n_experts == 0 &&
                    f.b.dim(1) == f.a.dim(0),
                "expert LoRA: expert ", s.expert, " of ", s.n_experts, " with factors A ", f.a.describe(), " and B ",
                f.b.describe(), " (expected A [E·r, in], B [out, r·E])");
  return f.a.dim(0) / s.n_experts;
}

// A_e: rows e·r .. e·r + r − 1 of A (a view).
Tensor expert_a(const Tensor& a, int64_t e, int64_t r) { return a.slice(0, e * r, (e + 1) * r); }

// B_e [out, r] with B_e[o, j] = B[o, j·E + e] (a copy: peft interleaves the experts in B's columns).
Tensor expert_b(const Tensor& b, int64_t e, int64_t r, int64_t E) {
  const int64_t out = b.dim(0);
  Tensor be = f32(out, r);
  for (int64_t o = 0; o < out; ++o) {
    const float* src = b.row_as<float>(o);
    float* dst = be.row_as<float>(o);
    for (int64_t j = 0; j < r; ++j) dst[j] = src[j * E + e];
  }
  return be;
}

}  // namespace

ExpertLora expert_site(const LayerSites& sites, Module m, int expert, int n_experts) {
  ExpertLora s{.expert = expert, .n_experts = n_experts};
  if (sites.enabled && sites.adapter)
    if (LoraFactors* f = sites.adapter->factors(sites.layer, m)) s.factors = f, s.scale = sites.adapter->scale();
  return s;
}

Tensor expert_lora_forward(const ExpertLora& s, const Tensor& x, Tensor& y) {
  const int64_t r = rank_of(s), m = x.dim(0);
  const LoraFactors& f = *s.factors;
  Tensor u = f32(m, r);
  ops::matmul(x, expert_a(f.a, s.expert, r), u);
  ops::scale(u, s.scale);
  Tensor delta = f32(m, y.dim(1));
  ops::matmul(u, expert_b(f.b, s.expert, r, s.n_experts), delta);
  ops::add_scaled(delta, 1.0f, y);
  return u;
}

void expert_lora_backward(const ExpertLora& s, const Tensor& x, const Tensor& u, const Tensor& dy, Tensor& dx) {
  const int64_t r = rank_of(s), m = x.dim(0), E = s.n_experts, out = dy.dim(1);
  LoraFactors& f = *s.factors;
  // dB_e += dyᵀ·u, into B's interleaved columns.
  Tensor d_be = ops::zeros(DType::F32, {out, r}, Device::CPU);
  ops::matmul_weight_grad(dy, u, d_be);
  for (int64_t o = 0; o < out; ++o) {
    const float* src = d_be.row_as<float>(o);
    float* dst = f.grad_b.row_as<float>(o);
    for (int64_t j = 0; j < r; ++j) dst[j * E + s.expert] += src[j];
  }
  Tensor g = f32(m, r);  // g = s·dy·B_e
  ops::matmul_input_grad(dy, expert_b(f.b, s.expert, r, E), g, ops::GradWrite::Overwrite);
  ops::scale(g, s.scale);
  Tensor d_ae = expert_a(f.grad_a, s.expert, r);
  ops::matmul_weight_grad(g, x, d_ae);                                                    // dA_e += gᵀ·x
  ops::matmul_input_grad(g, expert_a(f.a, s.expert, r), dx, ops::GradWrite::Accumulate);  // dx += g·A_e
}

}  // namespace brioche::train
