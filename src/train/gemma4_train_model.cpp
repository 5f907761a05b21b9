#include "train/gemma4_train_model.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "ops/add.h"
#include "ops/device.h"
#include "ops/embedding.h"
#include "ops/gelu_tanh.h"
#include "ops/layer_backward.h"
#include "ops/linear_backward.h"
#include "ops/gather_rows.h"
#include "ops/matmul.h"
#include "ops/moe.h"
#include "ops/rms_norm.h"
#include "ops/rope.h"
#include "ops/scaled_add.h"
#include "train/expert_lora.h"
#include "train/lora_linear.h"
#include "train/moe_grad.h"

namespace brioche::train {

namespace {

Tensor f32(int64_t n, int64_t d) { return ops::uninitialized(DType::F32, {n, d}, Device::CPU); }
Tensor zeros(int64_t n, int64_t d) { return ops::zeros(DType::F32, {n, d}, Device::CPU); }
Tensor copy_of(const Tensor& t) {
  Tensor out = f32(t.dim(0), t.dim(1));
  ops::copy(t, out);
  return out;
}

// y = RMSNorm over each head's hd values of x [n, heads·hd] (y may be x).
void rms_heads(const Tensor& x, const Tensor& w, float eps, int64_t heads, int64_t hd, Tensor& y) {
  const int64_t n = x.dim(0);
  Tensor yh = y.reshape({n * heads, hd});
  ops::rms_norm(x.reshape({n * heads, hd}), w, eps, yh);
}

// dx (=) the per-head RMSNorm backward of dy.
Tensor rms_heads_backward(const Tensor& x, const Tensor& w, float eps, int64_t heads, int64_t hd, const Tensor& dy) {
  const int64_t n = x.dim(0);
  Tensor dx = zeros(n * heads, hd);  // (rms_norm_backward adds into it)
  ops::rms_norm_backward(x.reshape({n * heads, hd}), w, eps, dy.reshape({n * heads, hd}), dx);
  return dx.reshape({n, heads * hd});
}

}  // namespace

LoraShapes gemma4_lora_shapes(const model::Gemma4Config& g) {
  return [g](int layer, Module m) -> ModuleShape {
    const model::Gemma4LayerSpec& s = g.layers[size_t(layer)];
    const int64_t hidden = g.base.hidden_size, q = int64_t(g.base.n_heads) * s.head_dim,
                  kv = int64_t(s.n_kv_heads) * s.head_dim, inter = s.intermediate_size;
    const bool own_kv = s.kv_source == layer;
    switch (m) {
      case Module::Q: return {hidden, q};
      case Module::K: return own_kv ? ModuleShape{hidden, kv} : ModuleShape{};
      case Module::V: return own_kv && !s.v_from_k ? ModuleShape{hidden, kv} : ModuleShape{};
      case Module::O: return {q, hidden};
      case Module::Gate:
      case Module::Up: return {hidden, inter};
      case Module::Down: return {inter, hidden};
      case Module::ExpertGateUp:  // the MoE block's [E, 2I, hidden] and [E, hidden, I]
        return g.moe ? ModuleShape{hidden, 2 * g.moe_intermediate_size, g.n_experts} : ModuleShape{};
      case Module::ExpertDown: return g.moe ? ModuleShape{g.moe_intermediate_size, hidden, g.n_experts} : ModuleShape{};
      default: break;  // no linear-attention projections, no shared expert
    }
    return {};
  };
}

Gemma4TrainModel::Gemma4TrainModel(const model::Gemma4Checkpoint& ck, LoraAdapter* adapter, int segment_size)
    : ck_(ck), adapter_(adapter), segment_size_(segment_size) {
  BRIOCHE_CHECK(segment_size >= 0, "train: segment_size must be >= 0, found ", segment_size);
  const model::Gemma4Config& g = ck.config;
  BRIOCHE_CHECK(ck.weights.output_norm.device() == Device::CPU, "train: Gemma 4 trains on the CPU only in this build");
  for (int l = 0; l < g.base.n_layers; ++l) inv_freq_.push_back(g.inv_freq(l));
  if (adapter) {
    BRIOCHE_CHECK(adapter->n_layers() == g.base.n_layers, "train: adapter has ", adapter->n_layers(),
                  " layers, the model ", g.base.n_layers);
    BRIOCHE_CHECK(adapter->device() == Device::CPU, "train: the adapter is on ", device_name(adapter->device()),
                  "; Gemma 4 trains on the CPU only in this build");
  }
}

int Gemma4TrainModel::first_trainable_layer() const {
  const int n = ck_.config.base.n_layers;
  if (!adapter_) return n;
  // A KV-shared adapted layer differentiates its source's K/V: the source must run in the trainable range.
  int first = adapter_->first_adapted_layer();
  for (int l = first; l < n; ++l) first = std::min(first, ck_.config.layers[size_t(l)].kv_source);
  return first;
}

Tensor Gemma4TrainModel::embed(const TokenBatch& batch) const {
  Tensor x = f32(batch.n_rows(), ck_.config.base.hidden_size);
  ops::embedding(ck_.weights.token_embd, batch.tokens, x);
  ops::scale(x, float(std::sqrt(double(ck_.config.base.hidden_size))));
  return x;
}

Tensor Gemma4TrainModel::per_layer_inputs(const TokenBatch& batch) const {
  const model::Gemma4Config& g = ck_.config;
  const model::Gemma4Weights& w = ck_.weights;
  if (g.ple_dim == 0) return Tensor();
  for (size_t r = 0; r < batch.tokens.size(); ++r)
    BRIOCHE_CHECK(batch.tokens[r] >= 0 && batch.tokens[r] < g.ple_vocab, "train: token ", batch.tokens[r], " at row ",
                  r, " is outside the per-layer input vocabulary of ", g.ple_vocab);
  const int64_t n = batch.n_rows(), L = g.base.n_layers, P = g.ple_dim;
  const Tensor x0 = embed(batch);
  Tensor ple = f32(n, L * P), tok = f32(n, L * P);
  ops::embedding(w.ple_embd, batch.tokens, tok);
  ops::scale(tok, float(std::sqrt(double(P))));
  ops::matmul(x0, w.ple_model_proj, ple);
  ops::scale(ple, float(1.0 / std::sqrt(double(g.base.hidden_size))));
  Tensor per_layer = ple.reshape({n * L, P});
  ops::rms_norm(per_layer, w.ple_proj_norm, g.base.rms_eps, per_layer);
  ops::add(ple, tok, ple);
  ops::scale(ple, float(1.0 / std::sqrt(2.0)));
  return ple;
}

void Gemma4TrainModel::layer_forward(const Pass& pass, int layer, Tensor& x, Cache& c, std::vector<Tensor>& kv_k,
                                     std::vector<Tensor>& kv_v) const {
  const model::Gemma4Config& g = ck_.config;
  const model::ModelConfig& cfg = g.base;
  const model::Gemma4LayerSpec& spec = g.layers[size_t(layer)];
  const model::Gemma4LayerWeights& w = ck_.weights.layers[size_t(layer)];
  const int64_t n = x.dim(0), H = cfg.n_heads, KV = spec.n_kv_heads, hd = spec.head_dim, hidden = cfg.hidden_size;
  const float eps = cfg.rms_eps;
  const bool own_kv = spec.kv_source == layer;
  const LayerSites site{.adapter = adapter_,
                        .layer = layer,
                        .enabled = pass.adapter_enabled,
                        .lora_dropout = pass.lora_dropout,
                        .seed = pass.dropout_seed};
  c = Cache();
  c.x_in = copy_of(x);
  c.h1 = f32(n, hidden);
  ops::rms_norm(x, w.attn_norm, eps, c.h1);

  // Q (and K, V in layers that compute their own) from h1, one LoRA group.
  std::vector<LoraSite> sites{site(Module::Q, w.wq, &w.bq)};
  std::vector<Module> modules{Module::Q};
  c.q_lin = f32(n, H * hd);
  std::vector<Tensor*> ys{&c.q_lin};
  if (own_kv) {
    c.k_lin = f32(n, KV * hd);
    sites.push_back(site(Module::K, w.wk, &w.bk)), modules.push_back(Module::K), ys.push_back(&c.k_lin);
    if (!spec.v_from_k) {
      c.v_lin = f32(n, KV * hd);
      sites.push_back(site(Module::V, w.wv, &w.bv)), modules.push_back(Module::V), ys.push_back(&c.v_lin);
    }
  }
  std::vector<Tensor*> us;
  for (size_t i = 0; i < sites.size(); ++i) {
    c.lora_u[size_t(modules[i])] = lora_u_buffer(sites[i], n);
    us.push_back(&c.lora_u[size_t(modules[i])]);
  }
  lora_linear_forward(sites, c.h1, ys, us);

  const ops::RopeParams q_rope{
      .style = ops::RopeStyle::NeoX, .n_heads = int(H), .head_dim = int(hd), .inv_freq = inv_freq_[size_t(layer)]};
  c.q = f32(n, H * hd);
  rms_heads(c.q_lin, w.q_norm, eps, H, hd, c.q);
  ops::rope(c.q, pass.batch.positions, q_rope);
  if (own_kv) {
    ops::RopeParams k_rope = q_rope;
    k_rope.n_heads = int(KV);
    c.k = f32(n, KV * hd);
    c.v = f32(n, KV * hd);
    rms_heads(c.k_lin, w.k_norm, eps, KV, hd, c.k);
    ops::rope(c.k, pass.batch.positions, k_rope);
    // attention_k_eq_v: V is k_proj's output, normed without scale, not rotated.
    rms_heads(spec.v_from_k ? c.k_lin : c.v_lin, w.v_norm, eps, KV, hd, c.v);
    kv_k[size_t(layer)] = c.k, kv_v[size_t(layer)] = c.v;
  } else {
    c.k = kv_k[size_t(spec.kv_source)], c.v = kv_v[size_t(spec.kv_source)];
    BRIOCHE_CHECK(c.k.defined(), "train: Gemma 4 layer ", layer, " reads layer ", spec.kv_source,
                  "'s K/V, which this forward did not compute");
  }
  c.attn = f32(n, H * hd);
  c.lse = f32(n, H);
  const ops::DenseAttentionParams ap{.n_heads = int(H),
                                     .n_kv_heads = int(KV),
                                     .head_dim = int(hd),
                                     .scale = 1.0f,
                                     .sliding_window = spec.sliding ? cfg.sliding_window : 0};
  ops::dense_attention({.q = c.q, .k = c.k, .v = c.v}, pass.layout, ap, c.attn, c.lse);

  c.o = f32(n, hidden);
  const LoraSite so = site(Module::O, w.wo, &w.bo);
  c.lora_u[size_t(Module::O)] = lora_u_buffer(so, n);
  lora_linear_forward(so, c.attn, c.o, &c.lora_u[size_t(Module::O)]);
  Tensor normed = f32(n, hidden);
  ops::rms_norm(c.o, w.post_attn_norm, eps, normed);
  ops::add(x, normed, x);
  c.x_mid = copy_of(x);

  // MLP: m = down(gelu_tanh(gate·h2) ⊙ up·h2)
  const int64_t inter = spec.intermediate_size;
  c.h2 = f32(n, hidden);
  ops::rms_norm(x, w.pre_ffn_norm, eps, c.h2);
  const LoraSite gu[] = {site(Module::Gate, w.w_gate), site(Module::Up, w.w_up)};
  c.gate = f32(n, inter), c.up = f32(n, inter), c.act = f32(n, inter);
  c.lora_u[size_t(Module::Gate)] = lora_u_buffer(gu[0], n);
  c.lora_u[size_t(Module::Up)] = lora_u_buffer(gu[1], n);
  Tensor* const gu_y[] = {&c.gate, &c.up};
  Tensor* const gu_u[] = {&c.lora_u[size_t(Module::Gate)], &c.lora_u[size_t(Module::Up)]};
  lora_linear_forward(gu, c.h2, gu_y, gu_u);
  ops::gelu_tanh_mul(c.gate, c.up, c.act);
  const LoraSite sd = site(Module::Down, w.w_down);
  c.m = f32(n, hidden);
  c.lora_u[size_t(Module::Down)] = lora_u_buffer(sd, n);
  lora_linear_forward(sd, c.act, c.m, &c.lora_u[size_t(Module::Down)]);
  if (g.moe) {
    c.dense = std::move(c.m);
    moe_forward(site, c);
    Tensor dense_normed = f32(n, hidden);
    c.m = f32(n, hidden);
    ops::rms_norm(c.dense, w.post_ffn_norm_1, eps, dense_normed);
    ops::rms_norm(c.moe_out, w.post_ffn_norm_2, eps, c.m);
    ops::add(dense_normed, c.m, c.m);
  }
  ops::rms_norm(c.m, w.post_ffn_norm, eps, normed);
  ops::add(x, normed, x);

  if (g.ple_dim > 0) {
    const int64_t P = g.ple_dim;
    c.x2 = copy_of(x);
    c.ple_gate = f32(n, P), c.ple_act = f32(n, P), c.ple_out = f32(n, hidden);
    ops::matmul(x, w.ple_gate, c.ple_gate);
    ops::gelu_tanh_mul(c.ple_gate, pass.ple.slice(1, layer * P, (layer + 1) * P), c.ple_act);
    ops::matmul(c.ple_act, w.ple_proj, c.ple_out);
    ops::rms_norm(c.ple_out, w.ple_post_norm, eps, normed);
    ops::add(x, normed, x);
  }
  if (w.layer_scalar != 1.0f) ops::scale(x, w.layer_scalar);
}

void Gemma4TrainModel::layer_backward(const Pass& pass, int layer, Cache& c, Tensor& dx) {
  const model::Gemma4Config& g = ck_.config;
  const model::ModelConfig& cfg = g.base;
  const model::Gemma4LayerSpec& spec = g.layers[size_t(layer)];
  const model::Gemma4LayerWeights& w = ck_.weights.layers[size_t(layer)];
  const int64_t n = dx.dim(0), H = cfg.n_heads, KV = spec.n_kv_heads, hd = spec.head_dim, hidden = cfg.hidden_size;
  const int64_t inter = spec.intermediate_size;
  const float eps = cfg.rms_eps;
  const bool own_kv = spec.kv_source == layer;
  const LayerSites site{.adapter = adapter_,
                        .layer = layer,
                        .enabled = pass.adapter_enabled,
                        .lora_dropout = pass.lora_dropout,
                        .seed = pass.dropout_seed};

  if (w.layer_scalar != 1.0f) ops::scale(dx, w.layer_scalar);  // dx = d x3
  if (g.ple_dim > 0) {
    const int64_t P = g.ple_dim;
    Tensor d_out = zeros(n, hidden);
    ops::rms_norm_backward(c.ple_out, w.ple_post_norm, eps, dx, d_out);
    Tensor d_act = f32(n, P);
    ops::matmul_input_grad(d_out, w.ple_proj, d_act, ops::GradWrite::Overwrite);
    ops::gelu_tanh_mul_backward(c.ple_gate, pass.ple.slice(1, layer * P, (layer + 1) * P), d_act, d_act, nullptr);
    ops::matmul_input_grad(d_act, w.ple_gate, dx, ops::GradWrite::Accumulate);  // dx = d x2
  }

  // MLP
  Tensor d_m = zeros(n, hidden);
  ops::rms_norm_backward(c.m, w.post_ffn_norm, eps, dx, d_m);
  if (g.moe) {  // m = RMSNorm(dense, n1) + RMSNorm(moe_out, n2)
    Tensor d_dense = zeros(n, hidden), d_moe = zeros(n, hidden);
    ops::rms_norm_backward(c.dense, w.post_ffn_norm_1, eps, d_m, d_dense);
    ops::rms_norm_backward(c.moe_out, w.post_ffn_norm_2, eps, d_m, d_moe);
    moe_backward(site, c, d_moe, dx);  // dx (d x2, which is also d x_mid's skip part) += the block's input grads
    d_m = std::move(d_dense);
  }
  Tensor d_act = f32(n, inter), d_up = f32(n, inter);
  lora_linear_backward(site(Module::Down, w.w_down),
                       {.x = c.act, .u = c.lora_u[size_t(Module::Down)], .dy = d_m, .dx = d_act});
  ops::gelu_tanh_mul_backward(c.gate, c.up, d_act, d_act, &d_up);  // d_act becomes d_gate
  Tensor d_h2 = f32(n, hidden);
  const LoraSite gu[] = {site(Module::Gate, w.w_gate), site(Module::Up, w.w_up)};
  const LoraLinearBackward gu_grads[] = {{.x = c.h2, .u = c.lora_u[size_t(Module::Gate)], .dy = d_act, .dx = d_h2},
                                         {.x = c.h2, .u = c.lora_u[size_t(Module::Up)], .dy = d_up, .dx = d_h2}};
  lora_linear_backward(gu, gu_grads);
  ops::rms_norm_backward(c.x_mid, w.pre_ffn_norm, eps, d_h2, dx);  // dx = d x_mid
  c.gate = c.up = c.act = c.m = c.h2 = c.x_mid = Tensor();

  // Attention
  Tensor d_o = zeros(n, hidden);
  ops::rms_norm_backward(c.o, w.post_attn_norm, eps, dx, d_o);
  Tensor d_attn = f32(n, H * hd);
  lora_linear_backward(site(Module::O, w.wo, &w.bo),
                       {.x = c.attn, .u = c.lora_u[size_t(Module::O)], .dy = d_o, .dx = d_attn});
  Tensor dq = f32(n, H * hd), dk = f32(n, KV * hd), dv = f32(n, KV * hd);
  const ops::DenseAttentionParams ap{.n_heads = int(H),
                                     .n_kv_heads = int(KV),
                                     .head_dim = int(hd),
                                     .scale = 1.0f,
                                     .sliding_window = spec.sliding ? cfg.sliding_window : 0};
  ops::dense_attention_backward({.q = c.q, .k = c.k, .v = c.v}, {.out = c.attn, .lse = c.lse, .dout = d_attn},
                                pass.layout, ap, {.dq = dq, .dk = dk, .dv = dv});
  const size_t src = size_t(spec.kv_source);
  if (!own_kv) {  // the source layer's K/V: its backward (later in this walk) takes these gradients too
    if (!dk_[src].defined()) dk_[src] = zeros(n, KV * hd), dv_[src] = zeros(n, KV * hd);
    ops::add(dk_[src], dk, dk_[src]);
    ops::add(dv_[src], dv, dv_[src]);
  } else if (dk_[src].defined()) {
    ops::add(dk, dk_[src], dk);
    ops::add(dv, dv_[src], dv);
    dk_[src] = dv_[src] = Tensor();
  }
  const ops::RopeParams q_rope{
      .style = ops::RopeStyle::NeoX, .n_heads = int(H), .head_dim = int(hd), .inv_freq = inv_freq_[size_t(layer)]};
  ops::rope_backward(dq, pass.batch.positions, q_rope);
  std::vector<LoraSite> sites{site(Module::Q, w.wq, &w.bq)};
  std::vector<Tensor> dys{rms_heads_backward(c.q_lin, w.q_norm, eps, H, hd, dq)};
  std::vector<Module> modules{Module::Q};
  std::vector<const Tensor*> xs_u;
  if (own_kv) {
    ops::RopeParams k_rope = q_rope;
    k_rope.n_heads = int(KV);
    ops::rope_backward(dk, pass.batch.positions, k_rope);
    Tensor dk_lin = rms_heads_backward(c.k_lin, w.k_norm, eps, KV, hd, dk);
    Tensor dv_lin = rms_heads_backward(spec.v_from_k ? c.k_lin : c.v_lin, w.v_norm, eps, KV, hd, dv);
    if (spec.v_from_k) {
      ops::add(dk_lin, dv_lin, dk_lin);
      sites.push_back(site(Module::K, w.wk, &w.bk)), dys.push_back(dk_lin), modules.push_back(Module::K);
    } else {
      sites.push_back(site(Module::K, w.wk, &w.bk)), dys.push_back(dk_lin), modules.push_back(Module::K);
      sites.push_back(site(Module::V, w.wv, &w.bv)), dys.push_back(dv_lin), modules.push_back(Module::V);
    }
  }
  Tensor d_h1 = f32(n, hidden);
  std::vector<LoraLinearBackward> grads;
  for (size_t i = 0; i < sites.size(); ++i)
    grads.push_back({.x = c.h1, .u = c.lora_u[size_t(modules[i])], .dy = dys[i], .dx = d_h1});
  lora_linear_backward(sites, grads);
  ops::rms_norm_backward(c.x_in, w.attn_norm, eps, d_h1, dx);  // dx = d x_in
  c = Cache();
}

void Gemma4TrainModel::moe_forward(const LayerSites& sites, Cache& c) const {
  const int layer = sites.layer;
  const model::Gemma4Config& g = ck_.config;
  const model::Gemma4LayerWeights& w = ck_.weights.layers[size_t(layer)];
  const int64_t n = c.x_mid.dim(0), hidden = g.base.hidden_size, I = g.moe_intermediate_size;
  const float eps = g.base.rms_eps;
  Tensor routed = f32(n, hidden);
  ops::rms_norm(c.x_mid, w.router_norm, eps, routed);  // router_norm = scale·hidden^−½ (no weight of its own)
  c.router_logits = f32(n, g.n_experts);
  ops::matmul(routed, w.router_proj, c.router_logits);
  ops::MoeRouting route = ops::moe_route(c.router_logits, g.top_k_experts, w.expert_scale);
  c.route_expert = std::move(route.expert);
  c.route_weight = std::move(route.weight);
  c.e_in = f32(n, hidden);
  ops::rms_norm(c.x_mid, w.pre_ffn_norm_2, eps, c.e_in);
  c.moe_out = zeros(n, hidden);
  c.experts.assign(size_t(g.n_experts), {});
  for (int64_t slot = 0; slot < int64_t(c.route_expert.size()); ++slot) {
    Cache::Expert& e = c.experts[size_t(c.route_expert[size_t(slot)])];
    e.rows.push_back(int32_t(slot / g.top_k_experts));
    e.slots.push_back(int32_t(slot));
    e.weights.push_back(c.route_weight[size_t(slot)]);
  }
  for (int id = 0; id < g.n_experts; ++id) {
    Cache::Expert& e = c.experts[size_t(id)];
    if (e.rows.empty()) continue;
    const int64_t m = int64_t(e.rows.size());
    Tensor in = f32(m, hidden);
    ops::gather_rows(c.e_in, e.rows, in);
    e.gate_up = f32(m, 2 * I), e.act = f32(m, I), e.y = f32(m, hidden);
    ops::matmul(in, w.experts_gate_up.select(id), e.gate_up);  // gate columns, then up
    if (const ExpertLora gu = expert_site(sites, Module::ExpertGateUp, id, g.n_experts); gu.factors) {
      e.u_gate_up = expert_lora_forward(gu, in, e.gate_up);
      e.in = in;
    }
    ops::gelu_tanh_mul(e.gate_up.slice(1, 0, I), e.gate_up.slice(1, I, 2 * I), e.act);
    ops::matmul(e.act, w.experts_down.select(id), e.y);
    if (const ExpertLora dn = expert_site(sites, Module::ExpertDown, id, g.n_experts); dn.factors)
      e.u_down = expert_lora_forward(dn, e.act, e.y);
    Tensor weighted = copy_of(e.y);
    ops::scale_rows(weighted, e.weights);
    ops::scatter_add_rows(weighted, e.rows, c.moe_out);
  }
}

void Gemma4TrainModel::moe_backward(const LayerSites& sites, Cache& c, const Tensor& d_moe, Tensor& dx) const {
  const int layer = sites.layer;
  const model::Gemma4Config& g = ck_.config;
  const model::Gemma4LayerWeights& w = ck_.weights.layers[size_t(layer)];
  const int64_t n = d_moe.dim(0), hidden = g.base.hidden_size, I = g.moe_intermediate_size, K = g.top_k_experts;
  const float eps = g.base.rms_eps;
  std::vector<double> d_weight(c.route_weight.size(), 0.0);
  Tensor d_e_in = zeros(n, hidden);
  for (int id = 0; id < g.n_experts; ++id) {
    Cache::Expert& e = c.experts[size_t(id)];
    if (e.rows.empty()) continue;
    const int64_t m = int64_t(e.rows.size());
    Tensor d_y = expert_output_grad(d_moe, e.rows, e.slots, e.weights, e.y, d_weight);
    Tensor d_act = f32(m, I), d_gate_up = f32(m, 2 * I), d_in = f32(m, hidden);
    ops::matmul_input_grad(d_y, w.experts_down.select(id), d_act, ops::GradWrite::Overwrite);
    if (const ExpertLora dn = expert_site(sites, Module::ExpertDown, id, g.n_experts); dn.factors)
      expert_lora_backward(dn, e.act, e.u_down, d_y, d_act);
    Tensor d_gate = d_gate_up.slice(1, 0, I), d_up = d_gate_up.slice(1, I, 2 * I);
    ops::gelu_tanh_mul_backward(e.gate_up.slice(1, 0, I), e.gate_up.slice(1, I, 2 * I), d_act, d_gate, &d_up);
    ops::matmul_input_grad(d_gate_up, w.experts_gate_up.select(id), d_in, ops::GradWrite::Overwrite);
    if (const ExpertLora gu = expert_site(sites, Module::ExpertGateUp, id, g.n_experts); gu.factors)
      expert_lora_backward(gu, e.in, e.u_gate_up, d_gate_up, d_in);
    ops::scatter_add_rows(d_in, e.rows, d_e_in);
  }
  ops::rms_norm_backward(c.x_mid, w.pre_ffn_norm_2, eps, d_e_in, dx);
  // Router: w_k = q_k·s_k with q the softmax of the top-k logits (transformers' softmax over all experts,
  // renormalised over the top k, is the same), so dz_k = q_k·(g_k − Σ_j q_j·g_j), g_k = dw_k·s_k.
  Tensor d_logits = zeros(n, g.n_experts);
  for (int64_t r = 0; r < n; ++r) {
    const float* z = c.router_logits.row_as<float>(r);
    double mx = -1e300, sum = 0.0, mean = 0.0;
    std::vector<double> q(static_cast<size_t>(K)), gk(static_cast<size_t>(K));
    for (int64_t k = 0; k < K; ++k) mx = std::max(mx, double(z[c.route_expert[size_t(r * K + k)]]));
    for (int64_t k = 0; k < K; ++k) sum += q[size_t(k)] = std::exp(double(z[c.route_expert[size_t(r * K + k)]]) - mx);
    for (int64_t k = 0; k < K; ++k) {
      const int32_t ex = c.route_expert[size_t(r * K + k)];
      q[size_t(k)] /= sum;
      gk[size_t(k)] = d_weight[size_t(r * K + k)] * double(w.expert_scale[size_t(ex)]);
      mean += q[size_t(k)] * gk[size_t(k)];
    }
    float* dz = d_logits.row_as<float>(r);
    for (int64_t k = 0; k < K; ++k)
      dz[c.route_expert[size_t(r * K + k)]] = float(q[size_t(k)] * (gk[size_t(k)] - mean));
  }
  Tensor d_routed = f32(n, hidden);
  ops::matmul_input_grad(d_logits, w.router_proj, d_routed, ops::GradWrite::Overwrite);
  ops::rms_norm_backward(c.x_mid, w.router_norm, eps, d_routed, dx);
  c.experts.clear();
}

Tensor Gemma4TrainModel::frozen_prefix(const TokenBatch& batch) const {
  Tensor x = embed(batch);
  const int first = first_trainable_layer();
  if (first == 0) return x;
  const Pass pass{.batch = batch,
                  .layout = batch.layout(),
                  .ple = per_layer_inputs(batch),
                  .adapter_enabled = false,
                  .lora_dropout = false};
  std::vector<Tensor> kv_k(size_t(ck_.config.base.n_layers)), kv_v(kv_k.size());
  Cache scratch;
  for (int l = 0; l < first; ++l) layer_forward(pass, l, x, scratch, kv_k, kv_v);
  return x;
}

Tensor Gemma4TrainModel::forward(const TokenBatch& batch, const Tensor& prefix_out, const ForwardOptions& o) {
  const model::ModelConfig& cfg = ck_.config.base;
  BRIOCHE_CHECK(prefix_out.dim(0) == batch.n_rows() && prefix_out.dim(1) == cfg.hidden_size,
                "train forward: prefix output ", prefix_out.describe(), " does not match ", batch.n_rows(), " rows of ",
                cfg.hidden_size);
  Tensor x = copy_of(prefix_out);
  const int first = first_trainable_layer(), L = cfg.n_layers;
  const Pass pass{.batch = batch,
                  .layout = batch.layout(),
                  .ple = per_layer_inputs(batch),
                  .dropout_seed = o.dropout_seed,
                  .adapter_enabled = o.adapter_enabled,
                  .lora_dropout = o.for_backward};
  const bool segmented = o.for_backward && segment_size_ > 0;
  caches_.clear(), boundaries_.clear(), kv_k_.clear(), kv_v_.clear();
  caches_.resize(o.for_backward && !segmented ? size_t(L - first) : 0);
  std::vector<Tensor> kv_k(static_cast<size_t>(L)), kv_v(static_cast<size_t>(L));
  Cache scratch;
  for (int l = first; l < L; ++l) {
    if (segmented && (l - first) % segment_size_ == 0) boundaries_.push_back(copy_of(x));
    layer_forward(pass, l, x, o.for_backward && !segmented ? caches_[size_t(l - first)] : scratch, kv_k, kv_v);
  }
  if (segmented) {
    // Keep only the K/V some KV-shared layer reads (its source may lie in an earlier segment).
    std::vector<bool> read(size_t(L), false);
    for (int l = first; l < L; ++l)
      if (const int src = ck_.config.layers[size_t(l)].kv_source; src != l) read[size_t(src)] = true;
    for (int l = 0; l < L; ++l)
      if (!read[size_t(l)]) kv_k[size_t(l)] = kv_v[size_t(l)] = Tensor();
    kv_k_ = std::move(kv_k), kv_v_ = std::move(kv_v);
  }
  Tensor h = f32(batch.n_rows(), cfg.hidden_size);
  ops::rms_norm(x, ck_.weights.output_norm, cfg.rms_eps, h);
  batch_ = o.for_backward ? &batch : nullptr;
  ple_ = o.for_backward ? pass.ple : Tensor();
  options_ = o;
  x_final_ = o.for_backward ? std::move(x) : Tensor();
  return h;
}

void Gemma4TrainModel::backward(Tensor d_hidden) {
  BRIOCHE_CHECK(batch_ != nullptr, "train backward: no forward(for_backward) to differentiate");
  const model::ModelConfig& cfg = ck_.config.base;
  Tensor dx = zeros(batch_->n_rows(), cfg.hidden_size);
  ops::rms_norm_backward(x_final_, ck_.weights.output_norm, cfg.rms_eps, d_hidden, dx);
  x_final_ = Tensor(), d_hidden = Tensor();
  const Pass pass{.batch = *batch_,
                  .layout = batch_->layout(),
                  .ple = ple_,
                  .dropout_seed = options_.dropout_seed,
                  .adapter_enabled = options_.adapter_enabled,
                  .lora_dropout = true};
  const int first = first_trainable_layer(), L = cfg.n_layers;
  dk_.assign(size_t(L), Tensor());
  dv_.assign(size_t(L), Tensor());
  if (boundaries_.empty()) {
    for (int l = L - 1; l >= first; --l) layer_backward(pass, l, caches_[size_t(l - first)], dx);
  } else {
    // One segment at a time, last first: its forward again from the saved residual (the same ops and
    // dropout masks, so the same activations), then its layers' backward.
    for (int s = int(boundaries_.size()) - 1; s >= 0; --s) {
      const int lo = first + s * segment_size_, hi = std::min(L, lo + segment_size_);
      std::vector<Cache> segment(size_t(hi - lo));
      std::vector<Tensor> kv_k = kv_k_, kv_v = kv_v_;
      Tensor x = std::move(boundaries_[size_t(s)]);
      for (int l = lo; l < hi; ++l) layer_forward(pass, l, x, segment[size_t(l - lo)], kv_k, kv_v);
      x = Tensor();
      for (int l = hi - 1; l >= lo; --l) {
        layer_backward(pass, l, segment[size_t(l - lo)], dx);
        segment[size_t(l - lo)] = Cache();
      }
    }
  }
  batch_ = nullptr;
  caches_.clear(), boundaries_.clear(), kv_k_.clear(), kv_v_.clear();
  dk_.clear(), dv_.clear();
  ple_ = Tensor();
}

size_t Gemma4TrainModel::saved_bytes() const {
  size_t n = x_final_.nbytes();
  for (const Tensor& b : boundaries_) n += b.nbytes();
  for (size_t l = 0; l < kv_k_.size(); ++l) n += kv_k_[l].nbytes() + kv_v_[l].nbytes();
  for (const Cache& c : caches_) {
    for (const Tensor* t : {&c.x_in, &c.h1, &c.q_lin, &c.k_lin, &c.v_lin, &c.q, &c.attn, &c.lse, &c.o, &c.x_mid, &c.h2,
                            &c.gate, &c.up, &c.act, &c.m, &c.x2, &c.ple_gate, &c.ple_act, &c.ple_out})
      n += t->nbytes();
    if (c.k_lin.defined()) n += c.k.nbytes() + c.v.nbytes();  // (a KV-shared layer's k/v are its source's)
    for (const Tensor& u : c.lora_u) n += u.nbytes();
    for (const Tensor* t : {&c.dense, &c.router_logits, &c.e_in, &c.moe_out}) n += t->nbytes();
    for (const Cache::Expert& e : c.experts)
      n +=
          e.gate_up.nbytes() + e.act.nbytes() + e.y.nbytes() + e.in.nbytes() + e.u_gate_up.nbytes() + e.u_down.nbytes();
  }
  return n;
}

}  // namespace brioche::train
