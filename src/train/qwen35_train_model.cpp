#include "train/qwen35_train_model.h"

#include <algorithm>
#include <cmath>
#include <span>

#include "core/error.h"
#include "ops/add.h"
#include "ops/attention_backward.h"
#include "ops/causal_conv1d.h"
#include "ops/causal_conv1d_backward.h"
#include "ops/device.h"
#include "ops/embedding.h"
#include "ops/gated_delta_rule.h"
#include "ops/gated_delta_rule_backward.h"
#include "ops/gather_rows.h"
#include "ops/layer_backward.h"
#include "ops/linear_backward.h"
#include "ops/matmul.h"
#include "ops/moe.h"
#include "ops/rms_norm.h"
#include "ops/rope.h"
#include "ops/sigmoid_gate.h"
#include "ops/swiglu.h"
#include "train/lora_linear.h"
#include "train/expert_lora.h"
#include "train/moe_grad.h"

namespace brioche::train {

namespace {

Tensor f32(int64_t n, int64_t d) { return ops::uninitialized(DType::F32, {n, d}, Device::CPU); }
Tensor zeros(std::initializer_list<int64_t> shape) { return ops::zeros(DType::F32, shape, Device::CPU); }
Tensor copy_of(const Tensor& t) {
  Tensor out = f32(t.dim(0), t.dim(1));
  ops::copy(t, out);
  return out;
}

// dst [m, w] += src[:, from : from + w].
void add_columns(const Tensor& src, int64_t from, Tensor& dst) {
  for (int64_t r = 0; r < dst.dim(0); ++r) {
    const float* a = src.row_as<float>(r) + from;
    float* b = dst.row_as<float>(r);
    for (int64_t j = 0; j < dst.dim(1); ++j) b[j] += a[j];
  }
}

// dst[:, at : at + w] = src [m, w].
void copy_columns(const Tensor& src, Tensor& dst, int64_t at) {
  for (int64_t r = 0; r < src.dim(0); ++r) std::copy_n(src.row_as<float>(r), src.dim(1), dst.row_as<float>(r) + at);
}

// Prefix-shared branches' states ([B, ...]: branch b starts from root branch_root[b]'s state in roots [R, ...]).
Tensor branch_states(std::span<const int32_t> branch_root, const Tensor& roots) {
  const int64_t per = roots.numel() / roots.dim(0), B = int64_t(branch_root.size());
  Tensor out = ops::uninitialized(DType::F32, {B, per}, Device::CPU);
  for (int64_t b = 0; b < B; ++b)
    std::copy_n(roots.data_as<float>() + branch_root[size_t(b)] * per, per, out.data_as<float>() + b * per);
  return out;
}

// d_roots[branch_root[b]] += d_branches[b]: both branches continue the prompt's state, so its gradient is the sum.
void add_to_roots(std::span<const int32_t> branch_root, const Tensor& d_branches, Tensor& d_roots) {
  const int64_t per = d_branches.numel() / d_branches.dim(0);
  for (size_t b = 0; b < branch_root.size(); ++b) {
    const float* src = d_branches.data_as<float>() + int64_t(b) * per;
    float* dst = d_roots.data_as<float>() + branch_root[b] * per;
    for (int64_t i = 0; i < per; ++i) dst[i] += src[i];
  }
}

// A branch's conv state [K−1, C] is its root's last K−1 inputs (zeros before the root's first row): their
// gradients add into those rows of d_qkv.
void add_conv_state_grads(std::span<const ops::RecurrentSequence> roots, std::span<const int32_t> branch_root,
                          const Tensor& d_branch_conv, Tensor& d_qkv) {
  const int64_t K1 = d_branch_conv.dim(1), C = d_branch_conv.dim(2);
  for (size_t b = 0; b < branch_root.size(); ++b) {
    const ops::RecurrentSequence& root = roots[size_t(branch_root[b])];
    for (int64_t i = 0; i < K1; ++i) {
      const int64_t row = int64_t(root.first_row) + root.n_rows - K1 + i;
      if (row < root.first_row) continue;
      const float* src = d_branch_conv.data_as<float>() + (int64_t(b) * K1 + i) * C;
      float* dst = d_qkv.row_as<float>(row);
      for (int64_t c = 0; c < C; ++c) dst[c] += src[c];
    }
  }
}

// The Gated DeltaNet core's shape.
ops::DeltaRuleShape delta_shape(const model::Qwen35Config& q) {
  return {.n_k_heads = q.linear_k_heads,
          .n_v_heads = q.linear_v_heads,
          .key_dim = q.linear_key_dim,
          .value_dim = q.linear_value_dim};
}

ops::DenseAttentionParams attention_params(const model::ModelConfig& c) {
  return {.n_heads = c.n_heads,
          .n_kv_heads = c.n_kv_heads,
          .head_dim = c.head_dim,
          .scale = 1.0f / std::sqrt(float(c.head_dim)),
          .sliding_window = 0};
}

}  // namespace

LoraShapes qwen35_lora_shapes(const model::Qwen35Checkpoint& ck) { return qwen35_lora_shapes(ck.config, ck.qwen); }

LoraShapes qwen35_lora_shapes(const model::ModelConfig& c, const model::Qwen35Config& q) {
  return [c, q](int layer, Module m) -> ModuleShape {
    const bool linear = q.linear_layers[size_t(layer)] != 0;
    const int64_t hidden = c.hidden_size, heads_dim = int64_t(c.n_heads) * c.head_dim;
    const bool shared = q.n_experts > 0 && q.shared_expert_intermediate > 0;
    switch (m) {
      case Module::Q: return linear ? ModuleShape{} : ModuleShape{hidden, 2 * heads_dim};  // query and gate rows
      case Module::K:
      case Module::V: return linear ? ModuleShape{} : ModuleShape{hidden, c.kv_dim()};
      case Module::O: return linear ? ModuleShape{} : ModuleShape{heads_dim, hidden};
      // gate/up/down: the dense MLP's, or in qwen3_5_moe the shared expert's (mlp.shared_expert.*)
      case Module::Gate:
      case Module::Up:
        if (q.n_experts == 0) return {hidden, c.intermediate_size};
        return shared ? ModuleShape{hidden, q.shared_expert_intermediate} : ModuleShape{};
      case Module::Down:
        if (q.n_experts == 0) return {c.intermediate_size, hidden};
        return shared ? ModuleShape{q.shared_expert_intermediate, hidden} : ModuleShape{};
      case Module::SharedExpertGate: return shared ? ModuleShape{hidden, 1} : ModuleShape{};
      case Module::ExpertGateUp:
        return q.n_experts > 0 ? ModuleShape{hidden, 2 * q.expert_intermediate, q.n_experts} : ModuleShape{};
      case Module::ExpertDown:
        return q.n_experts > 0 ? ModuleShape{q.expert_intermediate, hidden, q.n_experts} : ModuleShape{};
      case Module::LinearQkv: return linear ? ModuleShape{hidden, q.conv_channels()} : ModuleShape{};
      case Module::LinearZ: return linear ? ModuleShape{hidden, q.value_width()} : ModuleShape{};
      case Module::LinearB:
      case Module::LinearA: return linear ? ModuleShape{hidden, q.linear_v_heads} : ModuleShape{};
      case Module::LinearOut: return linear ? ModuleShape{q.value_width(), hidden} : ModuleShape{};
    }
    return {};
  };
}

Qwen35TrainModel::Qwen35TrainModel(const model::Qwen35Checkpoint& ck, LoraAdapter* adapter)
    : ck_(ck),
      adapter_(adapter),
      inv_freq_(ops::rope_inv_freq(ck.qwen.rotary_dim, ck.config.rope.theta, ck.config.rope.scaling)),
      unit_expert_scales_(size_t(ck.qwen.n_experts), 1.0f) {
  BRIOCHE_CHECK(ck.output_norm.device() == Device::CPU, "train: Qwen 3.5 trains on the CPU only in this build");
  if (adapter) {
    BRIOCHE_CHECK(adapter->n_layers() == ck.config.n_layers, "train: adapter has ", adapter->n_layers(),
                  " layers, the model ", ck.config.n_layers);
    BRIOCHE_CHECK(adapter->device() == Device::CPU, "train: the adapter is on ", device_name(adapter->device()),
                  "; Qwen 3.5 trains on the CPU only in this build");
  }
}

int Qwen35TrainModel::first_trainable_layer() const {
  return adapter_ ? adapter_->first_adapted_layer() : ck_.config.n_layers;
}

Tensor Qwen35TrainModel::embed(const TokenBatch& batch) const {
  Tensor x = f32(batch.n_rows(), ck_.config.hidden_size);
  ops::embedding(ck_.token_embd, batch.tokens, x);
  return x;
}

Qwen35TrainModel::Pass Qwen35TrainModel::make_pass(const TokenBatch& batch, const ForwardOptions& o) const {
  Pass pass{.batch = batch,
            .layout = batch.layout(),
            .dropout_seed = o.dropout_seed,
            .adapter_enabled = o.adapter_enabled,
            .lora_dropout = o.for_backward};
  for (const ops::AttentionSpan& s : batch.spans) {
    // A prefix-shared span's rows are [prompt (branch 0); chosen (1); rejected (2)].
    int32_t run[3] = {0, 0, 0};
    int expect = 0;
    for (int32_t r = s.first_row; r < s.first_row + s.n_rows; ++r) {
      const int b = batch.branch.empty() ? 0 : batch.branch[size_t(r)];
      BRIOCHE_CHECK(b >= expect && b <= 2, "train: the span at row ", s.first_row,
                    " is not laid out as [prompt; chosen; rejected]: a branch-", b, " row at row ", r, " after branch ",
                    expect);
      expect = b;
      ++run[b];
    }
    const int32_t root = int32_t(pass.sequences.size());
    auto sequence = [&](int32_t first, int32_t rows, int32_t slot, bool starts) {
      return ops::RecurrentSequence{.first_row = first,
                                    .n_rows = rows,
                                    .state_slot = slot,
                                    .starts = starts,
                                    .first_position = rows > 0 ? batch.positions[size_t(first)] : 0};
    };
    pass.sequences.push_back(sequence(s.first_row, run[0], root, true));
    int32_t first = s.first_row + run[0];
    for (int b = 1; b <= 2; ++b) {
      if (run[b] == 0) continue;
      BRIOCHE_CHECK(run[0] > 0, "train: the span at row ", s.first_row, " has branch rows and no prompt");
      pass.branches.push_back(sequence(first, run[b], int32_t(pass.branches.size()), false));
      pass.branch_root.push_back(root);
      first += run[b];
    }
  }
  const int64_t n = batch.n_rows(), heads = ck_.config.n_heads, kv_heads = ck_.config.n_kv_heads;
  pass.q_positions.resize(size_t(n * heads));
  pass.k_positions.resize(size_t(n * kv_heads));
  for (int64_t r = 0; r < n; ++r) {
    std::fill_n(pass.q_positions.begin() + r * heads, heads, batch.positions[size_t(r)]);
    std::fill_n(pass.k_positions.begin() + r * kv_heads, kv_heads, batch.positions[size_t(r)]);
  }
  return pass;
}

void Qwen35TrainModel::layer_forward(const Pass& pass, int layer, Tensor& x, Cache& c) const {
  const model::ModelConfig& cfg = ck_.config;
  const model::Qwen35Layer& w = ck_.layers[size_t(layer)];
  const int64_t n = x.dim(0), hidden = cfg.hidden_size, inter = cfg.intermediate_size;
  const float eps = cfg.rms_eps;
  c = Cache();
  c.x_in = copy_of(x);
  c.h1 = f32(n, hidden);
  ops::rms_norm(x, w.input_norm, eps, c.h1);
  Tensor out = f32(n, hidden);
  if (ck_.qwen.linear_layers[size_t(layer)])
    linear_forward(pass, layer, c, out);
  else
    full_forward(pass, layer, c, out);
  ops::add(x, out, x);
  c.x_mid = copy_of(x);

  // MLP: down(silu(gate·h2) ⊙ up·h2)
  const LayerSites site{.adapter = adapter_,
                        .layer = layer,
                        .enabled = pass.adapter_enabled,
                        .lora_dropout = pass.lora_dropout,
                        .seed = pass.dropout_seed};
  c.h2 = f32(n, hidden);
  ops::rms_norm(x, w.post_norm, eps, c.h2);
  if (ck_.qwen.n_experts > 0) {
    moe_forward(site, c, out);
    ops::add(x, out, x);
    return;
  }
  const LoraSite gu[] = {site(Module::Gate, w.mlp.gate), site(Module::Up, w.mlp.up)};
  c.gate = f32(n, inter), c.up = f32(n, inter), c.act = f32(n, inter);
  c.lora_u[size_t(Module::Gate)] = lora_u_buffer(gu[0], n);
  c.lora_u[size_t(Module::Up)] = lora_u_buffer(gu[1], n);
  Tensor* const gu_y[] = {&c.gate, &c.up};
  Tensor* const gu_u[] = {&c.lora_u[size_t(Module::Gate)], &c.lora_u[size_t(Module::Up)]};
  lora_linear_forward(gu, c.h2, gu_y, gu_u);
  ops::swiglu(c.gate, c.up, c.act);
  const LoraSite sd = site(Module::Down, w.mlp.down);
  c.lora_u[size_t(Module::Down)] = lora_u_buffer(sd, n);
  lora_linear_forward(sd, c.act, out, &c.lora_u[size_t(Module::Down)]);
  ops::add(x, out, x);
}

void Qwen35TrainModel::linear_forward(const Pass& pass, int layer, Cache& c, Tensor& out) const {
  const model::Qwen35Config& q = ck_.qwen;
  const model::Qwen35LinearAttention& la = ck_.layers[size_t(layer)].linear;
  const int64_t n = c.h1.dim(0), kw = q.key_width(), vw = q.value_width(), vh = q.linear_v_heads,
                channels = q.conv_channels(), roots = int64_t(pass.sequences.size());
  const LayerSites site{.adapter = adapter_,
                        .layer = layer,
                        .enabled = pass.adapter_enabled,
                        .lora_dropout = pass.lora_dropout,
                        .seed = pass.dropout_seed};
  // in_proj_qkv, in_proj_z, in_proj_b, in_proj_a: one LoRA group over h1.
  constexpr Module kIn[] = {Module::LinearQkv, Module::LinearZ, Module::LinearB, Module::LinearA};
  const LoraSite sites[] = {site(Module::LinearQkv, la.in_qkv), site(Module::LinearZ, la.in_z),
                            site(Module::LinearB, la.in_b), site(Module::LinearA, la.in_a)};
  c.qkv = f32(n, channels), c.z = f32(n, vw), c.b = f32(n, vh), c.a = f32(n, vh);
  Tensor* const ys[] = {&c.qkv, &c.z, &c.b, &c.a};
  Tensor* us[4];
  for (int i = 0; i < 4; ++i) {
    c.lora_u[size_t(kIn[i])] = lora_u_buffer(sites[i], n);
    us[i] = &c.lora_u[size_t(kIn[i])];
  }
  // (ops::lora_matmul takes at most three projections per group: two groups of two.)
  lora_linear_forward(std::span(sites, 2), c.h1, std::span(ys, 2), std::span(us, 2));
  lora_linear_forward(std::span(sites + 2, 2), c.h1, std::span(ys + 2, 2), std::span(us + 2, 2));

  // Scratch state slots: the roots' start at zero; each branch's starts as a copy of its root's final state.
  const int64_t branches = int64_t(pass.branches.size()), K1 = q.conv_kernel - 1, dk = q.linear_key_dim,
                dv = q.linear_value_dim;
  Tensor conv_state = zeros({std::max<int64_t>(roots, 1), K1, channels});
  c.mixed = f32(n, channels);
  ops::causal_conv1d_silu(c.qkv, la.conv, pass.sequences, conv_state, c.mixed);
  if (branches > 0) {
    Tensor branch_conv = branch_states(pass.branch_root, conv_state).reshape({branches, K1, channels});
    ops::causal_conv1d_silu(c.qkv, la.conv, pass.branches, branch_conv, c.mixed);
    c.root_conv = std::move(conv_state);
  }
  c.g = f32(n, vh), c.beta = f32(n, vh);
  ops::delta_rule_gates(c.a, c.b, {.a_log = la.a_log, .dt_bias = la.dt_bias}, c.g, c.beta);
  Tensor state = zeros({std::max<int64_t>(roots, 1), vh, dk, dv});
  c.core = f32(n, vw);
  const ops::DeltaRuleInputs rule{.q = c.mixed.slice(1, 0, kw),
                                  .k = c.mixed.slice(1, kw, 2 * kw),
                                  .v = c.mixed.slice(1, 2 * kw, 2 * kw + vw),
                                  .g = c.g,
                                  .beta = c.beta};
  ops::gated_delta_rule(rule, delta_shape(q), pass.sequences, state, c.core);
  if (branches > 0) {
    Tensor branch_state = branch_states(pass.branch_root, state).reshape({branches, vh, dk, dv});
    ops::gated_delta_rule(rule, delta_shape(q), pass.branches, branch_state, c.core);
    c.root_state = std::move(state);
  }
  // RMSNormGated per value head: rms_norm(core)·norm, then ·silu(z).
  c.normed = f32(n, vw);
  Tensor normed_heads = c.normed.reshape({n * vh, q.linear_value_dim});
  ops::rms_norm(c.core.reshape({n * vh, q.linear_value_dim}), la.norm, ck_.config.rms_eps, normed_heads);
  c.gated = f32(n, vw);
  ops::swiglu(c.z, c.normed, c.gated);
  const LoraSite so = site(Module::LinearOut, la.out);
  c.lora_u[size_t(Module::LinearOut)] = lora_u_buffer(so, n);
  lora_linear_forward(so, c.gated, out, &c.lora_u[size_t(Module::LinearOut)]);
}

void Qwen35TrainModel::full_forward(const Pass& pass, int layer, Cache& c, Tensor& out) const {
  const model::ModelConfig& cfg = ck_.config;
  const model::Qwen35FullAttention& fa = ck_.layers[size_t(layer)].full;
  const int64_t n = c.h1.dim(0), H = cfg.n_heads, KV = cfg.n_kv_heads, d = cfg.head_dim;
  const float eps = cfg.rms_eps;
  const LayerSites site{.adapter = adapter_,
                        .layer = layer,
                        .enabled = pass.adapter_enabled,
                        .lora_dropout = pass.lora_dropout,
                        .seed = pass.dropout_seed};
  constexpr Module kIn[] = {Module::Q, Module::K, Module::V};
  const LoraSite sites[] = {site(Module::Q, fa.wq), site(Module::K, fa.wk), site(Module::V, fa.wv)};
  c.q_gate = f32(n, H * 2 * d), c.k_lin = f32(n, KV * d), c.v = f32(n, KV * d);
  Tensor* const ys[] = {&c.q_gate, &c.k_lin, &c.v};
  Tensor* us[3];
  for (int i = 0; i < 3; ++i) {
    c.lora_u[size_t(kIn[i])] = lora_u_buffer(sites[i], n);
    us[i] = &c.lora_u[size_t(kIn[i])];
  }
  lora_linear_forward(sites, c.h1, ys, us);

  const Tensor per_head = c.q_gate.reshape({n * H, 2 * d});  // [query | gate] per head
  c.q = f32(n, H * d), c.k = f32(n, KV * d);
  Tensor q_heads = c.q.reshape({n * H, d}), k_heads = c.k.reshape({n * KV, d});
  ops::rms_norm(per_head.slice(1, 0, d), fa.q_norm, eps, q_heads);
  ops::rms_norm(c.k_lin.reshape({n * KV, d}), fa.k_norm, eps, k_heads);
  const ops::RopeParams rope{
      .style = ops::RopeStyle::NeoX, .n_heads = 1, .head_dim = ck_.qwen.rotary_dim, .inv_freq = inv_freq_};
  Tensor q_rot = q_heads.slice(1, 0, ck_.qwen.rotary_dim), k_rot = k_heads.slice(1, 0, ck_.qwen.rotary_dim);
  ops::rope(q_rot, pass.q_positions, rope);
  ops::rope(k_rot, pass.k_positions, rope);
  c.attn = f32(n, H * d), c.lse = f32(n, H);
  ops::dense_attention({.q = c.q, .k = c.k, .v = c.v}, pass.layout, attention_params(cfg), c.attn, c.lse);
  c.attn_gated = copy_of(c.attn);
  Tensor gated_heads = c.attn_gated.reshape({n * H, d});
  ops::sigmoid_gate(per_head.slice(1, d, 2 * d), gated_heads);
  const LoraSite so = site(Module::O, fa.wo);
  c.lora_u[size_t(Module::O)] = lora_u_buffer(so, n);
  lora_linear_forward(so, c.attn_gated, out, &c.lora_u[size_t(Module::O)]);
}

void Qwen35TrainModel::layer_backward(const Pass& pass, int layer, Cache& c, Tensor& dx) {
  const model::ModelConfig& cfg = ck_.config;
  const model::Qwen35Layer& w = ck_.layers[size_t(layer)];
  const int64_t n = dx.dim(0), hidden = cfg.hidden_size, inter = cfg.intermediate_size;
  const float eps = cfg.rms_eps;
  const LayerSites site{.adapter = adapter_,
                        .layer = layer,
                        .enabled = pass.adapter_enabled,
                        .lora_dropout = pass.lora_dropout,
                        .seed = pass.dropout_seed};
  // MLP (dx = d x_out = d of the MLP's output, and the skip's)
  if (ck_.qwen.n_experts > 0) {
    Tensor d_h2 = f32(n, hidden);
    moe_backward(site, c, dx, d_h2);
    ops::rms_norm_backward(c.x_mid, w.post_norm, eps, d_h2, dx);  // dx = d x_mid
  } else {
    Tensor d_act = f32(n, inter), d_up = f32(n, inter);
    lora_linear_backward(site(Module::Down, w.mlp.down),
                         {.x = c.act, .u = c.lora_u[size_t(Module::Down)], .dy = dx, .dx = d_act});
    ops::swiglu_backward(c.gate, c.up, d_act, d_act, d_up);  // d_act becomes d gate
    Tensor d_h2 = f32(n, hidden);
    const LoraSite gu[] = {site(Module::Gate, w.mlp.gate), site(Module::Up, w.mlp.up)};
    const LoraLinearBackward gu_grads[] = {{.x = c.h2, .u = c.lora_u[size_t(Module::Gate)], .dy = d_act, .dx = d_h2},
                                           {.x = c.h2, .u = c.lora_u[size_t(Module::Up)], .dy = d_up, .dx = d_h2}};
    lora_linear_backward(gu, gu_grads);
    ops::rms_norm_backward(c.x_mid, w.post_norm, eps, d_h2, dx);  // dx = d x_mid
  }
  c.gate = c.up = c.act = c.h2 = c.x_mid = Tensor();

  // The mixer (dx is also d of its output)
  Tensor d_h1 = f32(n, hidden);
  if (ck_.qwen.linear_layers[size_t(layer)])
    linear_backward(pass, layer, c, dx, d_h1);
  else
    full_backward(pass, layer, c, dx, d_h1);
  ops::rms_norm_backward(c.x_in, w.input_norm, eps, d_h1, dx);  // dx = d x_in
  c = Cache();
}

void Qwen35TrainModel::linear_backward(const Pass& pass, int layer, Cache& c, const Tensor& d_out, Tensor& d_h1) {
  const model::Qwen35Config& q = ck_.qwen;
  const model::Qwen35LinearAttention& la = ck_.layers[size_t(layer)].linear;
  const int64_t n = d_out.dim(0), kw = q.key_width(), vw = q.value_width(), vh = q.linear_v_heads,
                channels = q.conv_channels(), dv = q.linear_value_dim, key_dim = q.linear_key_dim;
  const LayerSites site{.adapter = adapter_,
                        .layer = layer,
                        .enabled = pass.adapter_enabled,
                        .lora_dropout = pass.lora_dropout,
                        .seed = pass.dropout_seed};
  Tensor d_gated = f32(n, vw);
  lora_linear_backward(site(Module::LinearOut, la.out),
                       {.x = c.gated, .u = c.lora_u[size_t(Module::LinearOut)], .dy = d_out, .dx = d_gated});
  // gated = silu(z) ⊙ normed
  Tensor dz = f32(n, vw), d_normed = f32(n, vw);
  ops::swiglu_backward(c.z, c.normed, d_gated, dz, d_normed);
  Tensor d_core = zeros({n, vw});
  Tensor d_core_heads = d_core.reshape({n * vh, dv});
  ops::rms_norm_backward(c.core.reshape({n * vh, dv}), la.norm, ck_.config.rms_eps, d_normed.reshape({n * vh, dv}),
                         d_core_heads);
  // The delta rule, then its gates, then the conv in front of it.
  Tensor d_mixed = f32(n, channels), dg = f32(n, vh), dbeta = f32(n, vh);
  Tensor dq = d_mixed.slice(1, 0, kw), dk = d_mixed.slice(1, kw, 2 * kw), dvv = d_mixed.slice(1, 2 * kw, 2 * kw + vw);
  const ops::DeltaRuleInputs rule{.q = c.mixed.slice(1, 0, kw),
                                  .k = c.mixed.slice(1, kw, 2 * kw),
                                  .v = c.mixed.slice(1, 2 * kw, 2 * kw + vw),
                                  .g = c.g,
                                  .beta = c.beta};
  const ops::DeltaRuleGrads rule_grads{.dq = dq, .dk = dk, .dv = dvv, .dg = dg, .dbeta = dbeta};
  const int64_t branches = int64_t(pass.branches.size());
  Tensor d_root_state;  // d of each root's final state: the sum over its branches of d of their initial state
  if (branches > 0) {
    const Tensor branch_state = branch_states(pass.branch_root, c.root_state).reshape({branches, vh, key_dim, dv});
    Tensor d_branch_state = f32(branches, vh * key_dim * dv).reshape({branches, vh, key_dim, dv});
    ops::gated_delta_rule_backward(rule, delta_shape(q), pass.branches, d_core, rule_grads,
                                   {.initial_state = &branch_state, .d_initial_state = &d_branch_state});
    d_root_state = zeros({c.root_state.dim(0), vh, key_dim, dv});
    add_to_roots(pass.branch_root, d_branch_state, d_root_state);
  }
  ops::gated_delta_rule_backward(rule, delta_shape(q), pass.sequences, d_core, rule_grads,
                                 {.d_final_state = branches > 0 ? &d_root_state : nullptr});
  Tensor da = f32(n, vh), db = f32(n, vh);
  ops::delta_rule_gates_backward(c.a, c.b, {.a_log = la.a_log, .dt_bias = la.dt_bias}, dg, dbeta, da, db);
  Tensor d_qkv = f32(n, channels);
  if (branches > 0) {
    // One call over roots and branches; the branches' conv states are their roots' last K−1 inputs, whose
    // gradients then add into those rows of d_qkv.
    std::vector<ops::RecurrentSequence> all = pass.sequences;
    all.insert(all.end(), pass.branches.begin(), pass.branches.end());
    const int64_t K1 = q.conv_kernel - 1;
    const Tensor branch_conv = branch_states(pass.branch_root, c.root_conv).reshape({branches, K1, channels});
    Tensor d_branch_conv = f32(branches, K1 * channels).reshape({branches, K1, channels});
    ops::causal_conv1d_silu_backward(c.qkv, la.conv, all, d_mixed, d_qkv,
                                     {.state = &branch_conv, .d_state = &d_branch_conv});
    add_conv_state_grads(pass.sequences, pass.branch_root, d_branch_conv, d_qkv);
  } else {
    ops::causal_conv1d_silu_backward(c.qkv, la.conv, pass.sequences, d_mixed, d_qkv);
  }
  c.root_state = c.root_conv = Tensor();
  // The four input projections read h1: two groups (the second adds into d_h1).
  const LoraSite sites[] = {site(Module::LinearQkv, la.in_qkv), site(Module::LinearZ, la.in_z),
                            site(Module::LinearB, la.in_b), site(Module::LinearA, la.in_a)};
  const LoraLinearBackward grads[] = {
      {.x = c.h1, .u = c.lora_u[size_t(Module::LinearQkv)], .dy = d_qkv, .dx = d_h1},
      {.x = c.h1, .u = c.lora_u[size_t(Module::LinearZ)], .dy = dz, .dx = d_h1},
      {.x = c.h1, .u = c.lora_u[size_t(Module::LinearB)], .dy = db, .dx = d_h1, .dx_mode = ops::GradWrite::Accumulate},
      {.x = c.h1, .u = c.lora_u[size_t(Module::LinearA)], .dy = da, .dx = d_h1}};
  lora_linear_backward(std::span(sites, 2), std::span(grads, 2));
  lora_linear_backward(std::span(sites + 2, 2), std::span(grads + 2, 2));
}

void Qwen35TrainModel::full_backward(const Pass& pass, int layer, Cache& c, const Tensor& d_out, Tensor& d_h1) {
  const model::ModelConfig& cfg = ck_.config;
  const model::Qwen35FullAttention& fa = ck_.layers[size_t(layer)].full;
  const int64_t n = d_out.dim(0), H = cfg.n_heads, KV = cfg.n_kv_heads, d = cfg.head_dim;
  const float eps = cfg.rms_eps;
  const LayerSites site{.adapter = adapter_,
                        .layer = layer,
                        .enabled = pass.adapter_enabled,
                        .lora_dropout = pass.lora_dropout,
                        .seed = pass.dropout_seed};
  Tensor d_gated = f32(n, H * d);
  lora_linear_backward(site(Module::O, fa.wo),
                       {.x = c.attn_gated, .u = c.lora_u[size_t(Module::O)], .dy = d_out, .dx = d_gated});
  // attn_gated = attn ⊙ σ(gate): d attn, and d gate into the gate half of d q_gate.
  const Tensor per_head = c.q_gate.reshape({n * H, 2 * d});
  Tensor d_q_gate = zeros({n, H * 2 * d});
  Tensor d_per_head = d_q_gate.reshape({n * H, 2 * d});
  Tensor d_attn = f32(n, H * d);
  Tensor d_attn_heads = d_attn.reshape({n * H, d}), d_gate = d_per_head.slice(1, d, 2 * d);
  ops::sigmoid_gate_backward(per_head.slice(1, d, 2 * d), c.attn.reshape({n * H, d}), d_gated.reshape({n * H, d}),
                             d_attn_heads, d_gate);
  Tensor dq = f32(n, H * d), dk = f32(n, KV * d), dv = f32(n, KV * d);
  ops::dense_attention_backward({.q = c.q, .k = c.k, .v = c.v}, {.out = c.attn, .lse = c.lse, .dout = d_attn},
                                pass.layout, attention_params(cfg), {.dq = dq, .dk = dk, .dv = dv});
  const ops::RopeParams rope{
      .style = ops::RopeStyle::NeoX, .n_heads = 1, .head_dim = ck_.qwen.rotary_dim, .inv_freq = inv_freq_};
  Tensor dq_heads = dq.reshape({n * H, d}), dk_heads = dk.reshape({n * KV, d});
  Tensor dq_rot = dq_heads.slice(1, 0, ck_.qwen.rotary_dim), dk_rot = dk_heads.slice(1, 0, ck_.qwen.rotary_dim);
  ops::rope_backward(dq_rot, pass.q_positions, rope);
  ops::rope_backward(dk_rot, pass.k_positions, rope);
  // The per-head norms (their input gradients accumulate into zeroed buffers).
  Tensor d_query = d_per_head.slice(1, 0, d);
  ops::rms_norm_backward(per_head.slice(1, 0, d), fa.q_norm, eps, dq_heads, d_query);
  Tensor dk_lin = zeros({n, KV * d});
  Tensor dk_lin_heads = dk_lin.reshape({n * KV, d});
  ops::rms_norm_backward(c.k_lin.reshape({n * KV, d}), fa.k_norm, eps, dk_heads, dk_lin_heads);
  const LoraSite sites[] = {site(Module::Q, fa.wq), site(Module::K, fa.wk), site(Module::V, fa.wv)};
  const LoraLinearBackward grads[] = {{.x = c.h1, .u = c.lora_u[size_t(Module::Q)], .dy = d_q_gate, .dx = d_h1},
                                      {.x = c.h1, .u = c.lora_u[size_t(Module::K)], .dy = dk_lin, .dx = d_h1},
                                      {.x = c.h1, .u = c.lora_u[size_t(Module::V)], .dy = dv, .dx = d_h1}};
  lora_linear_backward(sites, grads);
}

void Qwen35TrainModel::moe_forward(const LayerSites& sites, Cache& c, Tensor& out) const {
  const int layer = sites.layer;
  const model::Qwen35Config& q = ck_.qwen;
  const model::Qwen35Layer& w = ck_.layers[size_t(layer)];
  const int64_t n = c.h2.dim(0), hidden = ck_.config.hidden_size, I = q.expert_intermediate;
  c.router_logits = f32(n, q.n_experts);
  ops::matmul(c.h2, w.router, c.router_logits);
  ops::MoeRouting route = ops::moe_route(c.router_logits, q.experts_per_token, unit_expert_scales_);
  c.route_expert = std::move(route.expert);
  c.route_weight = std::move(route.weight);
  c.experts.assign(size_t(q.n_experts), {});
  for (int64_t slot = 0; slot < int64_t(c.route_expert.size()); ++slot) {
    Cache::Expert& e = c.experts[size_t(c.route_expert[size_t(slot)])];
    e.rows.push_back(int32_t(slot / q.experts_per_token));
    e.slots.push_back(int32_t(slot));
    e.weights.push_back(c.route_weight[size_t(slot)]);
  }
  std::fill_n(out.data_as<float>(), out.numel(), 0.0f);
  for (int id = 0; id < q.n_experts; ++id) {
    Cache::Expert& e = c.experts[size_t(id)];
    if (e.rows.empty()) continue;
    const model::Qwen35Mlp& m = w.experts[size_t(id)];
    const int64_t rows = int64_t(e.rows.size());
    Tensor in = f32(rows, hidden), act = f32(rows, I);
    ops::gather_rows(c.h2, e.rows, in);
    e.gate = f32(rows, I), e.up = f32(rows, I), e.y = f32(rows, hidden);
    ops::matmul(in, m.gate, e.gate);
    ops::matmul(in, m.up, e.up);
    if (const ExpertLora gu = expert_site(sites, Module::ExpertGateUp, id, q.n_experts); gu.factors) {
      // peft's gate_up_proj delta [2I, hidden]: gate rows, then up rows (brioche keeps the two apart)
      Tensor delta = zeros({rows, 2 * I});
      e.u_gate_up = expert_lora_forward(gu, in, delta);
      add_columns(delta, 0, e.gate);
      add_columns(delta, I, e.up);
      e.in = in;
    }
    ops::swiglu(e.gate, e.up, act);
    ops::matmul(act, m.down, e.y);
    if (const ExpertLora dn = expert_site(sites, Module::ExpertDown, id, q.n_experts); dn.factors) {
      e.u_down = expert_lora_forward(dn, act, e.y);
      e.act = act;
    }
    Tensor weighted = copy_of(e.y);
    ops::scale_rows(weighted, e.weights);
    ops::scatter_add_rows(weighted, e.rows, out);
  }
  if (w.shared_expert.gate.defined()) {
    const int64_t SI = q.shared_expert_intermediate;
    c.shared_gate = f32(n, SI), c.shared_up = f32(n, SI), c.shared_out = f32(n, hidden), c.shared_logit = f32(n, 1);
    c.shared_act = f32(n, SI);
    // The shared expert's gate/up/down and its sigmoid gate: plain Linear layers, LoRA as on any projection.
    const LoraSite gu[] = {sites(Module::Gate, w.shared_expert.gate), sites(Module::Up, w.shared_expert.up)};
    c.lora_u[size_t(Module::Gate)] = lora_u_buffer(gu[0], n);
    c.lora_u[size_t(Module::Up)] = lora_u_buffer(gu[1], n);
    Tensor* const gu_y[] = {&c.shared_gate, &c.shared_up};
    Tensor* const gu_u[] = {&c.lora_u[size_t(Module::Gate)], &c.lora_u[size_t(Module::Up)]};
    lora_linear_forward(gu, c.h2, gu_y, gu_u);
    ops::swiglu(c.shared_gate, c.shared_up, c.shared_act);
    const LoraSite sd = sites(Module::Down, w.shared_expert.down);
    c.lora_u[size_t(Module::Down)] = lora_u_buffer(sd, n);
    lora_linear_forward(sd, c.shared_act, c.shared_out, &c.lora_u[size_t(Module::Down)]);
    const LoraSite sg = sites(Module::SharedExpertGate, w.shared_expert_gate);
    c.lora_u[size_t(Module::SharedExpertGate)] = lora_u_buffer(sg, n);
    lora_linear_forward(sg, c.h2, c.shared_logit, &c.lora_u[size_t(Module::SharedExpertGate)]);
    Tensor gated = copy_of(c.shared_out);
    ops::sigmoid_gate(c.shared_logit, gated);
    ops::add(out, gated, out);
  }
}

void Qwen35TrainModel::moe_backward(const LayerSites& sites, Cache& c, const Tensor& d_out, Tensor& d_h2) const {
  const int layer = sites.layer;
  const model::Qwen35Config& q = ck_.qwen;
  const model::Qwen35Layer& w = ck_.layers[size_t(layer)];
  const int64_t n = d_out.dim(0), hidden = ck_.config.hidden_size, I = q.expert_intermediate, K = q.experts_per_token;
  std::fill_n(d_h2.data_as<float>(), d_h2.numel(), 0.0f);
  std::vector<double> d_weight(c.route_weight.size(), 0.0);
  for (int id = 0; id < q.n_experts; ++id) {
    Cache::Expert& e = c.experts[size_t(id)];
    if (e.rows.empty()) continue;
    const model::Qwen35Mlp& m = w.experts[size_t(id)];
    const int64_t rows = int64_t(e.rows.size());
    Tensor d_y = expert_output_grad(d_out, e.rows, e.slots, e.weights, e.y, d_weight);
    Tensor d_act = f32(rows, I), d_up = f32(rows, I), d_in = f32(rows, hidden);
    ops::matmul_input_grad(d_y, m.down, d_act, ops::GradWrite::Overwrite);
    if (const ExpertLora dn = expert_site(sites, Module::ExpertDown, id, q.n_experts); dn.factors)
      expert_lora_backward(dn, e.act, e.u_down, d_y, d_act);
    ops::swiglu_backward(e.gate, e.up, d_act, d_act, d_up);  // d_act becomes d gate
    ops::matmul_input_grad(d_act, m.gate, d_in, ops::GradWrite::Overwrite);
    ops::matmul_input_grad(d_up, m.up, d_in, ops::GradWrite::Accumulate);
    if (const ExpertLora gu = expert_site(sites, Module::ExpertGateUp, id, q.n_experts); gu.factors) {
      Tensor d_gate_up = f32(rows, 2 * I);  // [d gate | d up], as the delta's rows
      copy_columns(d_act, d_gate_up, 0);
      copy_columns(d_up, d_gate_up, I);
      expert_lora_backward(gu, e.in, e.u_gate_up, d_gate_up, d_in);
    }
    ops::scatter_add_rows(d_in, e.rows, d_h2);
  }
  // Router: w_k = softmax over the top-k logits (transformers' softmax over all experts renormalised over the
  // top k is the same), so dz_k = w_k·(g_k − Σ_j w_j·g_j) with g_k = dw_k.
  Tensor d_logits = zeros({n, q.n_experts});
  for (int64_t r = 0; r < n; ++r) {
    double mean = 0.0;
    for (int64_t k = 0; k < K; ++k) mean += double(c.route_weight[size_t(r * K + k)]) * d_weight[size_t(r * K + k)];
    float* dz = d_logits.row_as<float>(r);
    for (int64_t k = 0; k < K; ++k)
      dz[c.route_expert[size_t(r * K + k)]] =
          float(double(c.route_weight[size_t(r * K + k)]) * (d_weight[size_t(r * K + k)] - mean));
  }
  ops::matmul_input_grad(d_logits, w.router, d_h2, ops::GradWrite::Accumulate);
  if (w.shared_expert.gate.defined()) {
    const int64_t SI = q.shared_expert_intermediate;
    Tensor d_shared = f32(n, hidden), d_logit = f32(n, 1), d_act = f32(n, SI), d_up = f32(n, SI);
    ops::sigmoid_gate_backward(c.shared_logit, c.shared_out, d_out, d_shared, d_logit);
    lora_linear_backward(sites(Module::SharedExpertGate, w.shared_expert_gate),
                         {.x = c.h2,
                          .u = c.lora_u[size_t(Module::SharedExpertGate)],
                          .dy = d_logit,
                          .dx = d_h2,
                          .dx_mode = ops::GradWrite::Accumulate});
    lora_linear_backward(sites(Module::Down, w.shared_expert.down),
                         {.x = c.shared_act, .u = c.lora_u[size_t(Module::Down)], .dy = d_shared, .dx = d_act});
    ops::swiglu_backward(c.shared_gate, c.shared_up, d_act, d_act, d_up);
    const LoraSite gu[] = {sites(Module::Gate, w.shared_expert.gate), sites(Module::Up, w.shared_expert.up)};
    const LoraLinearBackward gu_grads[] = {{.x = c.h2,
                                            .u = c.lora_u[size_t(Module::Gate)],
                                            .dy = d_act,
                                            .dx = d_h2,
                                            .dx_mode = ops::GradWrite::Accumulate},
                                           {.x = c.h2, .u = c.lora_u[size_t(Module::Up)], .dy = d_up, .dx = d_h2}};
    lora_linear_backward(gu, gu_grads);
  }
  c.experts.clear();
}

Tensor Qwen35TrainModel::frozen_prefix(const TokenBatch& batch) const {
  Tensor x = embed(batch);
  const int first = first_trainable_layer();
  if (first == 0) return x;
  const Pass pass = make_pass(batch, {.adapter_enabled = false, .for_backward = false});
  Cache scratch;
  for (int l = 0; l < first; ++l) layer_forward(pass, l, x, scratch);
  return x;
}

Tensor Qwen35TrainModel::forward(const TokenBatch& batch, const Tensor& prefix_out, const ForwardOptions& o) {
  const model::ModelConfig& cfg = ck_.config;
  BRIOCHE_CHECK(prefix_out.dim(0) == batch.n_rows() && prefix_out.dim(1) == cfg.hidden_size,
                "train forward: prefix output ", prefix_out.describe(), " does not match ", batch.n_rows(), " rows of ",
                cfg.hidden_size);
  Tensor x = copy_of(prefix_out);
  const int first = first_trainable_layer(), L = cfg.n_layers;
  const Pass pass = make_pass(batch, o);
  caches_.clear();
  caches_.resize(o.for_backward ? size_t(L - first) : 0);
  Cache scratch;
  for (int l = first; l < L; ++l) layer_forward(pass, l, x, o.for_backward ? caches_[size_t(l - first)] : scratch);
  Tensor h = f32(batch.n_rows(), cfg.hidden_size);
  ops::rms_norm(x, ck_.output_norm, cfg.rms_eps, h);
  batch_ = o.for_backward ? &batch : nullptr;
  options_ = o;
  x_final_ = o.for_backward ? std::move(x) : Tensor();
  return h;
}

void Qwen35TrainModel::backward(Tensor d_hidden) {
  BRIOCHE_CHECK(batch_ != nullptr, "train backward: no forward(for_backward) to differentiate");
  const model::ModelConfig& cfg = ck_.config;
  Tensor dx = zeros({batch_->n_rows(), cfg.hidden_size});
  ops::rms_norm_backward(x_final_, ck_.output_norm, cfg.rms_eps, d_hidden, dx);
  x_final_ = Tensor(), d_hidden = Tensor();
  ForwardOptions o = options_;
  o.for_backward = true;  // the same LoRA dropout masks as the forward
  const Pass pass = make_pass(*batch_, o);
  const int first = first_trainable_layer();
  for (int l = cfg.n_layers - 1; l >= first; --l) layer_backward(pass, l, caches_[size_t(l - first)], dx);
  batch_ = nullptr;
  caches_.clear();
}

size_t Qwen35TrainModel::saved_bytes() const {
  size_t n = x_final_.nbytes();
  for (const Cache& c : caches_) {
    for (const Tensor* t : {&c.x_in, &c.h1,         &c.qkv,   &c.mixed,  &c.z,     &c.a,  &c.b,  &c.g, &c.beta,
                            &c.core, &c.normed,     &c.gated, &c.q_gate, &c.k_lin, &c.v,  &c.q,  &c.k, &c.attn,
                            &c.lse,  &c.attn_gated, &c.x_mid, &c.h2,     &c.gate,  &c.up, &c.act})
      n += t->nbytes();
    for (const Tensor& u : c.lora_u) n += u.nbytes();
    n += c.root_state.nbytes() + c.root_conv.nbytes();
    for (const Tensor* t :
         {&c.router_logits, &c.shared_gate, &c.shared_up, &c.shared_act, &c.shared_out, &c.shared_logit})
      n += t->nbytes();
    for (const Cache::Expert& e : c.experts)
      n += e.gate.nbytes() + e.up.nbytes() + e.y.nbytes() + e.in.nbytes() + e.act.nbytes() + e.u_gate_up.nbytes() +
           e.u_down.nbytes();
  }
  return n;
}

}  // namespace brioche::train
