#include "train/lora_linear.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "core/error.h"
#include "ops/add.h"
#include "ops/device.h"
#include "ops/fused_matmul.h"
#include "ops/lora_matmul.h"
#include "ops/matmul.h"
#include "ops/scaled_add.h"

namespace brioche::train {

LoraSite LayerSites::operator()(Module m, const Tensor& weight, const Tensor* bias) const {
  LoraSite s{.weight = &weight, .bias = bias};
  if (enabled && adapter) {
    if (LoraFactors* f = adapter->factors(layer, m)) {
      s.lora = f;
      s.scale = adapter->scale();
      s.dropout = lora_dropout_mask(lora_dropout ? adapter->config().dropout : 0.0f, seed, layer, m);
    }
  }
  return s;
}

Tensor lora_u_buffer(const LoraSite& site, int64_t n) {
  return site.lora ? Tensor::zeros(DType::F32, {n, site.lora->a.dim(0)}) : Tensor();
}

namespace {

// Buffers live on the device of the activations (the CPU or the GPU); each
// is written whole by the op that fills it (ops::uninitialized).
Tensor f32(int64_t n, int64_t d, Device device) { return ops::uninitialized(DType::F32, {n, d}, device); }

bool any_dropout(std::span<const LoraSite> sites) {
  return std::any_of(sites.begin(), sites.end(), [](const LoraSite& s) { return s.lora && s.dropout.active(); });
}

// The sites' factors as ops::LowRank (empty where a site has none).
std::vector<std::optional<ops::LowRank>> low_ranks(std::span<const LoraSite> sites) {
  std::vector<std::optional<ops::LowRank>> out(sites.size());
  for (size_t i = 0; i < sites.size(); ++i)
    if (sites[i].lora)
      out[i].emplace(ops::LowRank{.a = sites[i].lora->a, .b = sites[i].lora->b, .scale = sites[i].scale});
  return out;
}

const ops::LowRank* ptr(const std::optional<ops::LowRank>& lr) { return lr ? &*lr : nullptr; }

// With LoRA dropout the factors see drop(x), the base weight x.
void forward_with_dropout(const LoraSite& site, const Tensor& x, Tensor& y, Tensor* u) {
  ops::matmul(x, *site.weight, y);
  if (site.bias && site.bias->defined()) ops::add_bias(y, *site.bias);
  if (!site.lora) return;
  const Device dev = x.device();
  const int64_t n = x.dim(0);
  const auto& f = *site.lora;
  Tensor xd = f32(n, x.dim(1), dev);
  ops::dropout(x, site.dropout, xd);
  ops::matmul(xd, f.a, *u);    // drop(x)·Aᵀ             [n, r]
  ops::scale(*u, site.scale);  // u = s·drop(x)·Aᵀ       (saved)
  // y += u·Bᵀ (the scratch is used only where the op runs as matmul + add: the CPU)
  Tensor scratch = dev == Device::CPU ? f32(n, y.dim(1), dev) : Tensor();
  ops::matmul_accumulate(*u, f.b, y, scratch);
}

void backward_with_dropout(const LoraSite& site, const LoraLinearBackward& a) {
  ops::matmul_input_grad(a.dy, *site.weight, a.dx, a.dx_mode);  // dx (=|+=) dy·W
  if (!site.lora) return;
  auto& f = *site.lora;
  const Device dev = a.dy.device();
  const int64_t n = a.x.dim(0), r = f.a.dim(0);
  ops::matmul_weight_grad(a.dy, a.u, f.grad_b);  // dB += dyᵀ·u
  Tensor g = f32(n, r, dev);
  ops::matmul_input_grad(a.dy, f.b, g, ops::GradWrite::Overwrite);
  ops::scale(g, site.scale);  // g = s·dy·B   [n, r]
  Tensor xd = f32(n, a.x.dim(1), dev);
  ops::dropout(a.x, site.dropout, xd);
  ops::matmul_weight_grad(g, xd, f.grad_a);  // dA += gᵀ·drop(x)
  Tensor gx = xd;                            // (xd is no longer needed)
  ops::matmul_input_grad(g, f.a, gx, ops::GradWrite::Overwrite);
  ops::dropout(gx, site.dropout, gx);  // drop' = same mask
  ops::add_scaled(gx, 1.0f, a.dx);
}

}  // namespace

void lora_linear_forward(std::span<const LoraSite> sites, const Tensor& x, std::span<Tensor* const> ys,
                         std::span<Tensor* const> us) {
  BRIOCHE_CHECK(ys.size() == sites.size() && us.size() == sites.size(), "lora_linear_forward: ", sites.size(),
                " sites, ", ys.size(), " outputs and ", us.size(), " u buffers");
  if (any_dropout(sites)) {
    for (size_t i = 0; i < sites.size(); ++i) forward_with_dropout(sites[i], x, *ys[i], us[i]);
    return;
  }
  const auto low = low_ranks(sites);
  std::vector<ops::LoraMatmulPart> parts;
  for (size_t i = 0; i < sites.size(); ++i) parts.push_back({*sites[i].weight, ptr(low[i]), *ys[i], us[i]});
  ops::lora_matmul(x, parts);
  for (size_t i = 0; i < sites.size(); ++i)
    if (sites[i].bias && sites[i].bias->defined()) ops::add_bias(*ys[i], *sites[i].bias);
}

void lora_linear_forward(const LoraSite& site, const Tensor& x, Tensor& y, Tensor* u) {
  Tensor* const ys[] = {&y};
  Tensor* const us[] = {u};
  lora_linear_forward({&site, 1}, x, ys, us);
}

void lora_linear_backward(std::span<const LoraSite> sites, std::span<const LoraLinearBackward> args) {
  BRIOCHE_CHECK(!sites.empty() && args.size() == sites.size(), "lora_linear_backward: ", sites.size(), " sites and ",
                args.size(), " gradients");
  const Tensor& x = args[0].x;
  Tensor& dx = args[0].dx;
  for (size_t i = 1; i < args.size(); ++i)
    BRIOCHE_CHECK(&args[i].x == &x && &args[i].dx == &dx,
                  "lora_linear_backward: a group's sites share x and dx, "
                  "but site ",
                  i, " has x ", args[i].x.describe(), " and dx ", args[i].dx.describe(), " where site 0 has ",
                  x.describe(), " and ", dx.describe());
  if (any_dropout(sites)) {
    for (size_t i = 0; i < sites.size(); ++i) {
      const LoraLinearBackward& a = args[i];
      backward_with_dropout(
          sites[i],
          {.x = x, .u = a.u, .dy = a.dy, .dx = dx, .dx_mode = i == 0 ? a.dx_mode : ops::GradWrite::Accumulate});
    }
    return;
  }
  const auto low = low_ranks(sites);
  std::vector<ops::LoraMatmulGradPart> parts;
  for (size_t i = 0; i < sites.size(); ++i) {
    LoraFactors* f = sites[i].lora;
    parts.push_back({*sites[i].weight, ptr(low[i]), f ? &args[i].u : nullptr, args[i].dy, f ? &f->grad_a : nullptr,
                     f ? &f->grad_b : nullptr});
  }
  ops::lora_matmul_backward(x, parts, dx, args[0].dx_mode);
}

void lora_linear_backward(const LoraSite& site, const LoraLinearBackward& args) {
  lora_linear_backward({&site, 1}, {&args, 1});
}

}  // namespace brioche::train
