#include "train/train_layer.h"

#include <cmath>
#include <cstring>
#include <utility>

#include "core/error.h"
#include "ops/add.h"
#include "ops/device.h"
#include "ops/layer_backward.h"
#include "ops/lora_matmul.h"
#include "ops/rms_norm.h"
#include "ops/rope.h"
#include "ops/swiglu.h"
#include "train/lora_linear.h"

namespace brioche::train {

namespace {

// Activations live where the residual stream does (the CPU or the GPU).
// Every one is written whole by the op that produces it, so none is
// zero-filled first (on the CPU they start as NaN: a read before the write
// fails the tests).
Tensor f32(Device device, int64_t n, int64_t d) { return ops::uninitialized(DType::F32, {n, d}, device); }
Tensor bf16(Device device, int64_t n, int64_t d) { return ops::uninitialized(DType::BF16, {n, d}, device); }

void copy_rows(const Tensor& src, Tensor& dst) { ops::copy(src, dst); }

LoraSite site(const LayerContext& ctx, const LayerParams& p, Module m, const Tensor& w, const Tensor& bias) {
  LoraSite s{.weight = &w, .bias = &bias};
  if (ctx.adapter_enabled && p.adapter) {
    if (LoraFactors* f = p.adapter->factors(p.layer, m)) {
      s.lora = f;
      s.scale = p.adapter->scale();
      s.dropout =
          lora_dropout_mask(ctx.lora_dropout ? p.adapter->config().dropout : 0.0f, ctx.dropout_seed, p.layer, m);
    }
  }
  return s;
}

Tensor lora_u_buffer(const LoraSite& s, Device device, int64_t n) {
  return s.lora ? f32(device, n, s.lora->a.dim(0)) : Tensor();
}

ops::DenseAttentionParams attention_params(const model::ModelConfig& c) {
  return {.n_heads = c.n_heads,
          .n_kv_heads = c.n_kv_heads,
          .head_dim = c.head_dim,
          .scale = 1.0f / std::sqrt(float(c.head_dim)),
          .sliding_window = c.sliding_window};
}

ops::RopeParams rope_params(const LayerContext& ctx, int n_heads) {
  return {
      .style = ctx.config.rope.style, .n_heads = n_heads, .head_dim = ctx.config.head_dim, .inv_freq = ctx.inv_freq};
}

const Tensor kNoBias;

// The MLP's three LoRA sites of a layer.
struct MlpSites {
  LoraSite gate, up, down;
  const LoraSite& of(Module m) const { return m == Module::Gate ? gate : m == Module::Up ? up : down; }
  // The sites for a slice of the batch starting at row r0: dropout draws the
  // batch's mask of those rows.
  MlpSites rows(int64_t r0) const {
    MlpSites s = *this;
    for (LoraSite* x : {&s.gate, &s.up, &s.down}) x->dropout.first_row = r0;
    return s;
  }
};

// The attention's Q, K and V sites of a layer, in that order.
constexpr Module kQkv[3] = {Module::Q, Module::K, Module::V};
std::array<LoraSite, 3> qkv_sites(const LayerContext& ctx, const LayerParams& p) {
  const auto& w = p.weights;
  return {site(ctx, p, Module::Q, w.wq, w.bq), site(ctx, p, Module::K, w.wk, w.bk),
          site(ctx, p, Module::V, w.wv, w.bv)};
}

MlpSites mlp_sites(const LayerContext& ctx, const LayerParams& p) {
  return {site(ctx, p, Module::Gate, p.weights.w_gate, kNoBias), site(ctx, p, Module::Up, p.weights.w_up, kNoBias),
          site(ctx, p, Module::Down, p.weights.w_down, kNoBias)};
}

// Rows [r0, r1) of a saved [n, r] LoRA buffer (undefined without LoRA on the site).
Tensor rows_of(const Tensor& t, int64_t r0, int64_t r1) { return t.defined() ? t.slice(0, r0, r1) : Tensor(); }

// Rows the MLP handles per pass: the whole batch, or mlp_chunk_rows (then
// its [n, inter] activations are not kept: the backward recomputes them).
int64_t mlp_pass_rows(const LayerContext& ctx, int64_t n) {
  return ctx.mlp_chunk_rows > 0 && n > ctx.mlp_chunk_rows ? ctx.mlp_chunk_rows : n;
}

// Whether the MLP keeps act and the gradients of gate and up in bf16: where
// only tensor-core GEMMs read them (down's input; gate's and up's dy in the
// backward: ops::lora_matmul_on_tensor_cores for every pass, the shortest
// included) and no LoRA dropout needs them in f32 (its path is the plain
// ops). SwiGLU and its backward then write bf16 directly: no f32 copy to
// write and convert again (Llama-3-8B: [10,240, 14,336] is 587 MB in f32).
bool mlp_in_bf16(const MlpSites& s, const LayerParams& p, Device dev, int64_t n, int64_t pass,
                 const model::ModelConfig& cfg) {
  for (const LoraSite* site : {&s.gate, &s.up, &s.down})
    if (site->lora && site->dropout.active()) return false;
  const int64_t shortest = n % pass == 0 ? pass : n % pass;
  const Tensor* down[] = {&p.weights.w_down};
  const Tensor* gate_up[] = {&p.weights.w_gate, &p.weights.w_up};
  return ops::lora_matmul_on_tensor_cores(dev, shortest, cfg.intermediate_size, down) &&
         ops::lora_matmul_on_tensor_cores(dev, shortest, cfg.hidden_size, gate_up);
}

// [pass_rows, inter] buffers of the MLP, as views of one pass's rows. act
// is f32, or bf16 (mlp_in_bf16); d_up exists only in the bf16 backward (in
// f32, swiglu_backward writes d_up over d_act).
struct MlpBuffers {
  Tensor gate, up, act, d_up;
  MlpBuffers rows(int64_t n) const {
    return {gate.slice(0, 0, n), up.slice(0, 0, n), act.slice(0, 0, n),
            d_up.defined() ? d_up.slice(0, 0, n) : Tensor()};
  }
};

MlpBuffers mlp_buffers(const model::ModelConfig& cfg, Device dev, int64_t rows, bool in_bf16) {
  const int64_t inter = cfg.intermediate_size;
  return {f32(dev, rows, inter), f32(dev, rows, inter), in_bf16 ? bf16(dev, rows, inter) : f32(dev, rows, inter)};
}

// gate, up and act of rows [r0, r1) (from c.h2); the LoRA u of gate and up
// into c.lora_u's rows (the same values when recomputed).
void mlp_gate_up(const MlpSites& s, LayerCache& c, int64_t r0, int64_t r1, MlpBuffers& b) {
  const Tensor h2 = c.h2.slice(0, r0, r1);
  Tensor u_gate = rows_of(c.lora_u[size_t(Module::Gate)], r0, r1);
  Tensor u_up = rows_of(c.lora_u[size_t(Module::Up)], r0, r1);
  const LoraSite sites[] = {s.gate, s.up};
  Tensor* const ys[] = {&b.gate, &b.up};
  Tensor* const us[] = {&u_gate, &u_up};
  lora_linear_forward(sites, h2, ys, us);
  ops::swiglu(b.gate, b.up, b.act);
}

// After mlp_gate_up of the same rows: LoRA gradients of down, gate and up
// (+=), and d_h2 (=) for the rows; dx is d x_out of the rows. b.act becomes
// d_gate (it is not read again) and d_up is d_act (f32) or b.d_up (bf16);
// b.gate and b.up are dropped once read (the whole batch's are then freed).
void mlp_backward(const MlpSites& s, const LayerCache& c, int64_t r0, int64_t r1, MlpBuffers& b, Tensor& d_act,
                  const Tensor& dx, Tensor& d_h2) {
  const Tensor h2 = c.h2.slice(0, r0, r1);
  lora_linear_backward(s.down,
                       {.x = b.act, .u = rows_of(c.lora_u[size_t(Module::Down)], r0, r1), .dy = dx, .dx = d_act});
  Tensor& d_gate = b.act;
  Tensor& d_up = b.d_up.defined() ? b.d_up : d_act;  // f32: in place (swiglu_backward allows it)
  ops::swiglu_backward(b.gate, b.up, d_act, d_gate, d_up);
  b.gate = Tensor(), b.up = Tensor();
  const Tensor u_gate = rows_of(c.lora_u[size_t(Module::Gate)], r0, r1);
  const Tensor u_up = rows_of(c.lora_u[size_t(Module::Up)], r0, r1);
  const LoraSite sites[] = {s.gate, s.up};
  const LoraLinearBackward grads[] = {{.x = h2, .u = u_gate, .dy = d_gate, .dx = d_h2},
                                      {.x = h2, .u = u_up, .dy = d_up, .dx = d_h2}};
  lora_linear_backward(sites, grads);
}

}  // namespace

void layer_forward(const LayerContext& ctx, const LayerParams& p, Tensor& x, LayerCache& c) {
  const auto& cfg = ctx.config;
  const auto& w = p.weights;
  const int64_t n = x.dim(0);
  const Device dev = x.device();
  c.x_in = f32(dev, n, cfg.hidden_size);
  copy_rows(x, c.x_in);
  c.h1 = f32(dev, n, cfg.hidden_size);
  ops::rms_norm(x, w.attn_norm, cfg.rms_eps, c.h1);

  c.q = f32(dev, n, cfg.q_dim());
  c.k = f32(dev, n, cfg.kv_dim());
  c.v = f32(dev, n, cfg.kv_dim());
  Tensor* const outs[3] = {&c.q, &c.k, &c.v};
  const std::array<LoraSite, 3> sites = qkv_sites(ctx, p);
  Tensor* us[3];
  for (int i = 0; i < 3; ++i) {
    c.lora_u[size_t(kQkv[i])] = lora_u_buffer(sites[size_t(i)], dev, n);
    us[i] = &c.lora_u[size_t(kQkv[i])];
  }
  lora_linear_forward(sites, c.h1, outs, us);
  c.h1 = Tensor();  // the backward normalises x_in again: one cheap pass for [n, hidden] less at its peak
  if (w.q_norm.defined()) {
    // Qwen3: RMSNorm over each head's head_dim values, before RoPE.
    c.q_raw = f32(dev, n, cfg.q_dim());
    c.k_raw = f32(dev, n, cfg.kv_dim());
    copy_rows(c.q, c.q_raw);
    copy_rows(c.k, c.k_raw);
    Tensor qh = c.q.reshape({n * cfg.n_heads, cfg.head_dim});
    Tensor kh = c.k.reshape({n * cfg.n_kv_heads, cfg.head_dim});
    ops::rms_norm(qh, w.q_norm, cfg.rms_eps, qh);
    ops::rms_norm(kh, w.k_norm, cfg.rms_eps, kh);
  }
  ops::rope(c.q, ctx.positions, rope_params(ctx, cfg.n_heads));
  ops::rope(c.k, ctx.positions, rope_params(ctx, cfg.n_kv_heads));
  if (c.attention_given) {
    BRIOCHE_CHECK(c.attn.defined() && c.attn.dim(0) == n && c.attn.dim(1) == cfg.q_dim() && c.lse.defined() &&
                      c.lse.dim(0) == n && c.lse.dim(1) == cfg.n_heads,
                  "layer_forward: the given attention output must be [", n, ", ", cfg.q_dim(), "] with lse [", n, ", ",
                  cfg.n_heads, "], got ", c.attn.describe(), " and ", c.lse.describe());
    c.attention_given = false;
  } else {
    c.attn = f32(dev, n, cfg.q_dim());
    c.lse = f32(dev, n, cfg.n_heads);
    ops::dense_attention({.q = c.q, .k = c.k, .v = c.v}, ctx.layout, attention_params(cfg), c.attn, c.lse);
  }

  Tensor o = f32(dev, n, cfg.hidden_size);
  LoraSite so = site(ctx, p, Module::O, w.wo, w.bo);
  c.lora_u[size_t(Module::O)] = lora_u_buffer(so, dev, n);
  lora_linear_forward(so, c.attn, o, &c.lora_u[size_t(Module::O)]);
  ops::add(x, o, x);
  c.x_mid = f32(dev, n, cfg.hidden_size);
  copy_rows(x, c.x_mid);

  c.h2 = f32(dev, n, cfg.hidden_size);
  ops::rms_norm(x, w.ffn_norm, cfg.rms_eps, c.h2);
  const MlpSites s = mlp_sites(ctx, p);
  for (Module m : {Module::Gate, Module::Up, Module::Down}) c.lora_u[size_t(m)] = lora_u_buffer(s.of(m), dev, n);
  // o = down(silu(gate)·up), a pass of rows at a time; the whole batch's
  // gate, up and act stay for the backward, row chunks' do not.
  const int64_t pass = mlp_pass_rows(ctx, n);
  c.gate = Tensor(), c.up = Tensor(), c.act = Tensor();  // a reused cache's, before the new ones
  const MlpBuffers buffers = mlp_buffers(cfg, dev, pass, mlp_in_bf16(s, p, dev, n, pass, cfg));
  for (int64_t r0 = 0; r0 < n; r0 += pass) {
    const int64_t r1 = std::min(n, r0 + pass);
    const MlpSites rs = s.rows(r0);
    MlpBuffers b = buffers.rows(r1 - r0);
    mlp_gate_up(rs, c, r0, r1, b);
    Tensor o_rows = o.slice(0, r0, r1), u_down = rows_of(c.lora_u[size_t(Module::Down)], r0, r1);
    lora_linear_forward(rs.down, b.act, o_rows, &u_down);
  }
  if (pass == n) c.gate = buffers.gate, c.up = buffers.up, c.act = buffers.act;
  ops::add(x, o, x);
}

void layer_backward(const LayerContext& ctx, const LayerParams& p, LayerCache& c, Tensor& dx) {
  const auto& cfg = ctx.config;
  const auto& w = p.weights;
  const int64_t n = dx.dim(0);
  const Device dev = dx.device();

  // MLP: x_out = x_mid + down(silu(g)·u);  dx (= d x_out) flows to x_mid unchanged.
  const MlpSites s = mlp_sites(ctx, p);
  Tensor d_h2 = f32(dev, n, cfg.hidden_size);
  {
    // The forward's passes: the whole batch from the cache, or row chunks
    // recomputed. The [n, inter] buffers are the largest of a layer: each
    // goes as soon as it has been read for the last time.
    const int64_t pass = mlp_pass_rows(ctx, n);
    const bool in_bf16 = mlp_in_bf16(s, p, dev, n, pass, cfg);
    MlpBuffers buffers = pass == n ? MlpBuffers{c.gate, c.up, c.act} : mlp_buffers(cfg, dev, pass, in_bf16);
    if (in_bf16) buffers.d_up = bf16(dev, pass, cfg.intermediate_size);
    c.gate = Tensor(), c.up = Tensor(), c.act = Tensor();
    Tensor d_act = f32(dev, pass, cfg.intermediate_size);
    for (int64_t r0 = 0; r0 < n; r0 += pass) {
      const int64_t r1 = std::min(n, r0 + pass);
      const MlpSites rs = s.rows(r0);
      // The whole batch hands its buffers over (mlp_backward frees them early).
      MlpBuffers b = pass == n ? std::move(buffers) : buffers.rows(r1 - r0);
      if (pass != n) mlp_gate_up(rs, c, r0, r1, b);  // the forward's gate, up and act of these rows, again
      Tensor d_act_rows = d_act.slice(0, 0, r1 - r0), dx_rows = dx.slice(0, r0, r1), d_h2_rows = d_h2.slice(0, r0, r1);
      mlp_backward(rs, c, r0, r1, b, d_act_rows, dx_rows, d_h2_rows);
    }
  }
  c.h2 = Tensor();
  ops::rms_norm_backward(c.x_mid, w.ffn_norm, cfg.rms_eps, d_h2, dx);  // dx = d x_mid
  c.x_mid = Tensor(), d_h2 = Tensor();

  // Attention: x_mid = x_in + o(attn(...)).
  Tensor d_attn = f32(dev, n, cfg.q_dim());
  lora_linear_backward(site(ctx, p, Module::O, w.wo, w.bo),
                       {.x = c.attn, .u = c.lora_u[size_t(Module::O)], .dy = dx, .dx = d_attn});
  Tensor dq = f32(dev, n, cfg.q_dim()), dk = f32(dev, n, cfg.kv_dim()), dv = f32(dev, n, cfg.kv_dim());
  ops::dense_attention_backward({.q = c.q, .k = c.k, .v = c.v}, {.out = c.attn, .lse = c.lse, .dout = d_attn},
                                ctx.layout, attention_params(cfg), {.dq = dq, .dk = dk, .dv = dv});
  c.q = Tensor(), c.k = Tensor(), c.v = Tensor(), c.attn = Tensor(), d_attn = Tensor();
  ops::rope_backward(dq, ctx.positions, rope_params(ctx, cfg.n_heads));
  ops::rope_backward(dk, ctx.positions, rope_params(ctx, cfg.n_kv_heads));
  if (w.q_norm.defined()) {
    // (zero-filled: rms_norm_backward adds into its dx)
    Tensor dq_raw = ops::zeros(DType::F32, {n * cfg.n_heads, cfg.head_dim}, dev);
    Tensor dk_raw = ops::zeros(DType::F32, {n * cfg.n_kv_heads, cfg.head_dim}, dev);
    ops::rms_norm_backward(c.q_raw.reshape({n * cfg.n_heads, cfg.head_dim}), w.q_norm, cfg.rms_eps,
                           dq.reshape({n * cfg.n_heads, cfg.head_dim}), dq_raw);
    ops::rms_norm_backward(c.k_raw.reshape({n * cfg.n_kv_heads, cfg.head_dim}), w.k_norm, cfg.rms_eps,
                           dk.reshape({n * cfg.n_kv_heads, cfg.head_dim}), dk_raw);
    dq = dq_raw.reshape({n, cfg.q_dim()});
    dk = dk_raw.reshape({n, cfg.kv_dim()});
  }
  Tensor d_h1 = f32(dev, n, cfg.hidden_size);
  c.h1 = f32(dev, n, cfg.hidden_size);
  ops::rms_norm(c.x_in, w.attn_norm, cfg.rms_eps, c.h1);  // as the forward did (bit-identical)
  const std::array<LoraSite, 3> sites = qkv_sites(ctx, p);
  const LoraLinearBackward grads[] = {{.x = c.h1, .u = c.lora_u[size_t(Module::Q)], .dy = dq, .dx = d_h1},
                                      {.x = c.h1, .u = c.lora_u[size_t(Module::K)], .dy = dk, .dx = d_h1},
                                      {.x = c.h1, .u = c.lora_u[size_t(Module::V)], .dy = dv, .dx = d_h1}};
  lora_linear_backward(sites, grads);
  ops::rms_norm_backward(c.x_in, w.attn_norm, cfg.rms_eps, d_h1, dx);  // dx = d x_in
  c = LayerCache();  // consumed: its buffers go before the next layer's recompute allocates its own
}

}  // namespace brioche::train
