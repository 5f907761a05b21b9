// Gemma 4's text model (transformers' Gemma4TextModel + the LM head), per
// token row, with RMSNorm(x) = x·(mean(x²) + eps)^−½ ⊙ w:
//
//   x = √hidden · embed(token)
//   ple = ((per_layer_model_projection·x)·hidden^−½ normed per layer
//          + √P · embed_tokens_per_layer(token)) · 2^−½    [L, P]   (when P > 0)
//   for each layer i:
//     h = RMSNorm(x, input_layernorm)
//     q = RMSNorm_per_head(q_proj·h, q_norm), RoPE of the layer type
//     unless KV-shared:
//       k = RMSNorm_per_head(k_proj·h, k_norm), RoPE
//       v = RMSNorm_per_head(v_proj·h, no scale)   (v_proj = k_proj with attention_k_eq_v)
//       K/V stored in the layer's cache
//     a = softmax(q·kᵀ) v over the cache of kv_source (scale 1: q and k are
//         normed), causal, within sliding_window on sliding layers
//     x += RMSNorm(o_proj·a, post_attention_layernorm)
//     m = down(gelu_tanh(gate·h') ⊙ up·h'),  h' = RMSNorm(x, pre_feedforward_layernorm)
//     with the MoE block:
//       m = RMSNorm(m, post_ffn_norm_1)
//         + RMSNorm(Σ_top-k w_e · expert_e(RMSNorm(x, pre_ffn_norm_2)), post_ffn_norm_2),
//       experts and weights chosen by the router from x
//     x += RMSNorm(m, post_feedforward_layernorm)
//     when P > 0:
//       x += RMSNorm(per_layer_projection·(gelu_tanh(per_layer_input_gate·x) ⊙ ple[i]),
//                    post_per_layer_input_norm)
//     x *= layer_scalar
//   logits = lm_head·RMSNorm(x, norm), then cap·tanh(logits/cap) with soft-capping
//
// Every step is an op (ops/), so the same code runs on the CPU or on CUDA
// (weights, scratch and cache on the model's device); on CUDA a decode step
// runs as a recorded graph (model/decode_graphs.h) where graphs_take says
// so. Nothing here hands a norm on between ops (ops/norm_handoff.h): each
// post-norm reads the output its own op just wrote.
#include "model/gemma4.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "core/error.h"
#include "ops/add.h"
#include "ops/attention.h"
#include "ops/device.h"
#include "ops/device_graph.h"
#include "ops/embedding.h"
#include "ops/fused_matmul.h"
#include "ops/gather_rows.h"
#include "ops/gelu_tanh.h"
#include "ops/lora_rows.h"
#include "ops/matmul.h"
#include "ops/moe.h"
#include "ops/rms_norm.h"
#include "ops/rope.h"
#include "ops/scaled_add.h"
#include "ops/quantize.h"
#include "ops/softcap.h"

namespace brioche::model {

namespace {

// Up to this many rows (decode steps), the device runs the MoE experts as
// one expert matmul over every (row, expert) pair; above, expert by expert
// over the rows routed to it (GEMMs).
constexpr int64_t kExpertMatmulRows = 8;

// attention_bias: y += b (undefined b: no bias).
void add_bias(Tensor& y, const Tensor& b) {
  if (b.defined()) ops::add_bias(y, b);
}

// ys = RMSNorm(x)·wsᵀ, RMSNorm(x) in `normed` when `normed_read` (served
// adapters read it after the projections): on the GPU the fused norm of
// matmul_group does not write it (ops/fused_matmul.h), so there the norm
// runs on its own first.
void normed_group(const Tensor& x, const ops::RmsNormFirst& norm, std::span<const Tensor* const> ws,
                  std::span<Tensor* const> ys, bool normed_read) {
  if (normed_read && x.device() != Device::CPU) {
    ops::rms_norm(x, norm.weight, norm.eps, norm.normed);
    ops::matmul_group(norm.normed, ws, ys);
    return;
  }
  ops::matmul_group(x, norm, ws, ys);
}

}  // namespace

Tensor Gemma4Model::Scratch::rows(int64_t n, int64_t width) {
  const int64_t need = std::max<int64_t>(n * width, 1);
  if (!flat.defined() || flat.dim(0) < need) flat = ops::zeros(dtype, {need}, device);
  return flat.slice(0, 0, n * width).reshape({n, width});
}

Gemma4Model::Gemma4Model(Gemma4Checkpoint checkpoint)
    : ck_(std::move(checkpoint)), device_(ck_.weights.token_embd.device()) {
  for (int i = 0; i < ck_.config.base.n_layers; ++i) inv_freq_.push_back(ck_.config.inv_freq(i));
}

size_t Gemma4Model::weight_bytes() const {
  const Gemma4Weights& w = ck_.weights;
  size_t n = 0;
  auto add = [&n](const Tensor& t) {
    if (t.defined()) n += t.nbytes();
  };
  for (const Tensor* t : {&w.token_embd, &w.output_norm, &w.ple_embd, &w.ple_model_proj, &w.ple_proj_norm}) add(*t);
  if (!ck_.config.base.tied_embeddings) add(w.output);
  for (const Gemma4LayerWeights& l : w.layers)
    for (Tensor Gemma4LayerWeights::*t : kGemma4LayerTensors) add(l.*t);
  return n;
}

void Gemma4Model::check_batch(const ForwardBatch& batch, const KvCache& cache) const {
  const ModelConfig& c = ck_.config.base;
  const int32_t n = batch.n_rows();
  check_batch_rows(batch, c.vocab_size);
  BRIOCHE_CHECK(cache.n_layers() == c.n_layers, "forward: KV cache of ", cache.n_layers(), " layers, the model has ",
                c.n_layers);
  for (int l = 0; l < c.n_layers; ++l) {
    const KvLayerShape want = c.kv_shape(l);
    const Tensor& k = cache.keys(l);
    const bool fits = want.n_kv_heads == 0 ? !k.defined()
                                           : k.defined() && k.device() == device_ && k.dim(2) == want.n_kv_heads &&
                                                 k.dim(3) == want.head_dim;
    BRIOCHE_CHECK(fits, "forward: KV cache layer ", l, " is ", k.defined() ? k.describe() : std::string("empty"),
                  ", expected ",
                  want.n_kv_heads == 0 ? std::string("none (a KV-shared layer)")
                                       : std::to_string(want.n_kv_heads) + " kv heads of " +
                                             std::to_string(want.head_dim) + " on " + device_name(device_),
                  " (build the cache from this model's config() on its device())");
  }
  for (size_t s = 0; s < batch.sequences.size(); ++s) {
    const ServedAdapter* a = batch.sequences[s].adapter;
    BRIOCHE_CHECK(a == nullptr || int(a->layers.size()) == c.n_layers, "forward: sequence ", s, "'s LoRA adapter has ",
                  a ? a->layers.size() : 0, " layers, the model ", c.n_layers);
  }
  if (ck_.config.ple_dim > 0) {
    for (int32_t r = 0; r < n; ++r)
      BRIOCHE_CHECK(batch.tokens[size_t(r)] < ck_.config.ple_vocab, "forward: token ", batch.tokens[size_t(r)],
                    " at row ", r, " is outside the per-layer input vocabulary of ", ck_.config.ple_vocab);
  }
}

Tensor Gemma4Model::per_layer_inputs(const ForwardBatch& batch, const Tensor& x) {
  const Gemma4Config& g = ck_.config;
  const Gemma4Weights& w = ck_.weights;
  const int64_t n = batch.n_rows(), L = g.base.n_layers, P = g.ple_dim;
  Tensor ple = buf_->ple.rows(n, L * P);      // [n, L·P]
  Tensor tok = buf_->ple_tok.rows(n, L * P);  // [n, L·P]
  ops::embedding(w.ple_embd, batch.tokens, tok);
  ops::scale(tok, float(std::sqrt(double(P))));
  ops::matmul(x, w.ple_model_proj, ple);
  ops::scale(ple, float(1.0 / std::sqrt(double(g.base.hidden_size))));
  Tensor per_layer = ple.reshape({n * L, P});  // each layer's P values normed on their own
  ops::rms_norm(per_layer, w.ple_proj_norm, g.base.rms_eps, per_layer);
  ops::add(ple, tok, ple);
  ops::scale(ple, float(1.0 / std::sqrt(2.0)));
  return ple;
}

void Gemma4Model::add_lora(int layer, Projection p, const Tensor& x, Tensor& y) {
  if (lora_table_ != nullptr) {
    const ops::LoraTablePart part{.entry = layer * kBlockProjections + int32_t(p), .y = &y};
    Tensor u = lora_table_->u;
    ops::lora_table_add(x, lora_table_->table(), std::span(&part, 1), u);
    return;
  }
  if (adapter_rows_.empty()) return;
  Tensor u = buf_->lora_u.rows(x.dim(0), adapter_rank_);
  add_adapter_rows(adapter_rows_, {.layer = layer, .projection = p}, x, y, u);
}

void Gemma4Model::attention(int layer, const ForwardBatch& batch,
                            std::span<const ops::AttentionSequence> main_sequences,
                            std::span<const ops::AttentionSequence> window_sequences, KvCache& cache, Tensor& x) {
  const Gemma4Config& g = ck_.config;
  const ModelConfig& c = g.base;
  const Gemma4LayerSpec& spec = g.layers[size_t(layer)];
  const Gemma4LayerWeights& lw = ck_.weights.layers[size_t(layer)];
  const int64_t n = x.dim(0), hd = spec.head_dim, H = c.n_heads, KV = spec.n_kv_heads;

  Tensor h = buf_->h.rows(n, c.hidden_size);
  Tensor q = buf_->q.rows(n, H * hd);        // [n, H·hd]
  Tensor attn = buf_->attn.rows(n, H * hd);  // [n, H·hd]
  Tensor out = buf_->out.rows(n, c.hidden_size);
  const bool own_kv = !g.kv_shared(layer);
  // The layer whose cache holds the K/V read here (itself unless KV-shared)
  // decides the table: a sliding layer's blocks may be in the window pool.
  const std::span<const ops::AttentionSequence> sequences =
      cache.windowed(spec.kv_source) ? window_sequences : main_sequences;
  Tensor k, v;
  if (own_kv) {
    k = buf_->k.rows(n, KV * hd);  // [n, KV·hd]
    v = buf_->v.rows(n, KV * hd);
    const Tensor* ws[] = {&lw.wq, &lw.wk, &lw.wv};
    Tensor* ys[] = {&q, &k, &v};
    // With attention_k_eq_v there is no v_proj: V is k_proj's output, taken
    // before k's norm and RoPE.
    normed_group(x, {.weight = lw.attn_norm, .eps = c.rms_eps, .normed = h}, std::span(ws, spec.v_from_k ? 2 : 3),
                 std::span(ys, spec.v_from_k ? 2 : 3), adapted());
    add_bias(q, lw.bq);
    add_bias(k, lw.bk);
    if (!spec.v_from_k) add_bias(v, lw.bv);
    add_lora(layer, Projection::Q, h, q);
    add_lora(layer, Projection::K, h, k);
    if (!spec.v_from_k) add_lora(layer, Projection::V, h, v);
    if (spec.v_from_k) ops::copy(k, v);
    Tensor k_heads = k.reshape({n * KV, hd});
    Tensor v_heads = v.reshape({n * KV, hd});
    ops::rms_norm(k_heads, lw.k_norm, c.rms_eps, k_heads);
    ops::rms_norm(v_heads, lw.v_norm, c.rms_eps, v_heads);
  } else {
    const Tensor* ws[] = {&lw.wq};
    Tensor* ys[] = {&q};
    normed_group(x, {.weight = lw.attn_norm, .eps = c.rms_eps, .normed = h}, ws, ys, adapted());
    add_bias(q, lw.bq);
    add_lora(layer, Projection::Q, h, q);
  }
  Tensor q_heads = q.reshape({n * H, hd});
  ops::rms_norm(q_heads, lw.q_norm, c.rms_eps, q_heads);

  const ops::RopeParams rope{
      .style = ops::RopeStyle::NeoX, .n_heads = int(H), .head_dim = int(hd), .inv_freq = inv_freq_[size_t(layer)]};
  const ops::AttentionParams params{.n_heads = int(H),
                                    .n_kv_heads = int(KV),
                                    .head_dim = int(hd),
                                    .scale = 1.0f,
                                    .sliding_window = spec.sliding ? c.sliding_window : 0};
  // A bound decode step (a CUDA graph) reads the window pool's tables from its inputs.
  const ops::ScopedWindowTables window_tables(cache.windowed(spec.kv_source));
  if (own_kv) {
    const ops::RopeStoreKvFirst first{.k = k, .v = v, .positions = batch.positions, .q_rope = rope};
    ops::paged_attention(q, first, {.k = cache.keys(layer), .v = cache.values(layer), .sequences = sequences}, params,
                         attn);
  } else {
    // The source layer ran earlier in this forward, so its cache already
    // holds these rows' K/V.
    ops::rope(q, batch.positions, rope);
    ops::paged_attention(
        q, {.k = cache.keys(spec.kv_source), .v = cache.values(spec.kv_source), .sequences = sequences}, params, attn);
  }
  ops::matmul(attn, lw.wo, out);
  add_bias(out, lw.bo);
  add_lora(layer, Projection::O, attn, out);
  ops::rms_norm(out, lw.post_attn_norm, c.rms_eps, out);
  ops::add(x, out, x);
}

void Gemma4Model::experts(int layer, const Tensor& x, Tensor& out) {
  const Gemma4Config& g = ck_.config;
  const Gemma4LayerWeights& lw = ck_.weights.layers[size_t(layer)];
  const int64_t n = x.dim(0), hidden = g.base.hidden_size, I = g.moe_intermediate_size;
  // The router reads the residual stream: RMSNorm without scale, times
  // scale·hidden^−½ (folded into router_norm), projected to expert logits.
  Tensor routed = buf_->moe_in.rows(n, hidden);
  Tensor logits = buf_->router.rows(n, g.n_experts);
  ops::rms_norm(x, lw.router_norm, g.base.rms_eps, routed);
  ops::matmul(routed, lw.router_proj, logits);
  if (device_ != Device::CPU && n <= kExpertMatmulRows && !any_adapts_experts(adapter_rows_, layer)) {
    // Decode rows on the device, routed there (no wait for the host: a
    // decode graph records this): every (row, expert) pair in one
    // ops::expert_matmul per projection, which reads only the chosen
    // experts' weights. Row r's pairs are [r·k, (r + 1)·k) in ascending
    // expert order, added to out in that order (the expert loop's below).
    const int k = g.top_k_experts;
    const int64_t pairs = n * k;
    Tensor expert = buf_->route_expert.rows(pairs, 1).reshape({pairs});
    Tensor weight = buf_->route_weight.rows(pairs, 1).reshape({pairs});
    ops::moe_route_pairs(logits, k, lw.expert_scale, expert, weight);
    // The experts read RMSNorm(x, pre_feedforward_layernorm_2).
    ops::rms_norm(x, lw.pre_ffn_norm_2, g.base.rms_eps, routed);
    std::vector<int32_t> pair_row(static_cast<size_t>(pairs)), pair_index(static_cast<size_t>(pairs));
    for (int64_t p = 0; p < pairs; ++p) pair_row[size_t(p)] = int32_t(p / k), pair_index[size_t(p)] = int32_t(p);
    Tensor gate_up = buf_->expert_gate_up.rows(pairs, 2 * I);  // [pairs, 2I]: gate columns, then up
    Tensor act = buf_->expert_act.rows(pairs, I);
    Tensor y = buf_->expert_out.rows(pairs, hidden);
    ops::expert_matmul(routed, pair_row, lw.experts_gate_up, expert, gate_up);
    ops::gelu_tanh_mul(gate_up.slice(1, 0, I), gate_up.slice(1, I, 2 * I), act);
    ops::expert_matmul(act, pair_index, lw.experts_down, expert, y);
    ops::scale_rows(y, weight);
    ops::fill(out, 0.0f);
    ops::scatter_add_rows(y, pair_row, out);
    return;
  }
  const ops::MoeRouting route = ops::moe_route(logits, g.top_k_experts, lw.expert_scale);
  // The experts read RMSNorm(x, pre_feedforward_layernorm_2).
  ops::rms_norm(x, lw.pre_ffn_norm_2, g.base.rms_eps, routed);
  ops::fill(out, 0.0f);
  if (any_adapts_experts(adapter_rows_, layer)) return experts_with_adapters(layer, routed, route, out);
  std::vector<int32_t> rows;
  std::vector<float> weights;
  for (int e = 0; e < g.n_experts; ++e) {
    rows.clear();
    weights.clear();
    for (int64_t r = 0; r < n; ++r)
      for (int k = 0; k < route.top_k; ++k)
        if (route.expert[size_t(r * route.top_k + k)] == e) {
          rows.push_back(int32_t(r));
          weights.push_back(route.weight[size_t(r * route.top_k + k)]);
        }
    if (rows.empty()) continue;
    const int64_t m = int64_t(rows.size());
    Tensor in = buf_->expert_in.rows(m, hidden);
    Tensor gate_up = buf_->expert_gate_up.rows(m, 2 * I);  // [m, 2I]: gate columns, then up
    Tensor act = buf_->expert_act.rows(m, I);
    Tensor y = buf_->expert_out.rows(m, hidden);
    ops::gather_rows(routed, rows, in);
    ops::matmul(in, lw.experts_gate_up.select(e), gate_up);
    ops::gelu_tanh_mul(gate_up.slice(1, 0, I), gate_up.slice(1, I, 2 * I), act);
    ops::matmul(act, lw.experts_down.select(e), y);
    ops::scale_rows(y, weights);
    ops::scatter_add_rows(y, rows, out);
  }
}

void Gemma4Model::experts_with_adapters(int layer, const Tensor& routed, const ops::MoeRouting& route, Tensor& out) {
  const Gemma4Config& g = ck_.config;
  const Gemma4LayerWeights& lw = ck_.weights.layers[size_t(layer)];
  const int64_t n = routed.dim(0), hidden = g.base.hidden_size, I = g.moe_intermediate_size;
  // (row, weight) pairs grouped by expert, rows ascending in each: expert e's are [first[e], first[e + 1]).
  std::vector<int32_t> rows;
  std::vector<float> weights;
  std::vector<int64_t> first(size_t(g.n_experts) + 1, 0);
  for (int e = 0; e < g.n_experts; ++e) {
    first[size_t(e)] = int64_t(rows.size());
    for (int64_t r = 0; r < n; ++r)
      for (int k = 0; k < route.top_k; ++k)
        if (route.expert[size_t(r * route.top_k + k)] == e) {
          rows.push_back(int32_t(r));
          weights.push_back(route.weight[size_t(r * route.top_k + k)]);
        }
  }
  first.back() = int64_t(rows.size());
  const int64_t total = int64_t(rows.size());
  Tensor in = buf_->expert_in.rows(total, hidden);
  Tensor gate_up = buf_->expert_gate_up.rows(total, 2 * I);  // [total, 2I]: gate columns, then up
  Tensor act = buf_->expert_act.rows(total, I);
  Tensor y = buf_->expert_out.rows(total, hidden);
  Tensor u = buf_->lora_u.rows(total, adapter_rank_);
  ops::gather_rows(routed, rows, in);
  const auto each_expert = [&](auto&& run) {
    for (int e = 0; e < g.n_experts; ++e)
      if (first[size_t(e) + 1] > first[size_t(e)]) run(e, first[size_t(e)], first[size_t(e) + 1]);
  };
  each_expert([&](int e, int64_t begin, int64_t end) {
    Tensor gu = gate_up.slice(0, begin, end);
    ops::matmul(in.slice(0, begin, end), lw.experts_gate_up.select(e), gu);
  });
  Tensor gate = gate_up.slice(1, 0, I), up = gate_up.slice(1, I, 2 * I);
  const ExpertRows layout{.layer = layer, .batch_rows = rows, .expert_first = first};
  add_expert_gate_up_adapter_rows(adapter_rows_, layout, in, gate, up, u);
  ops::gelu_tanh_mul(gate, up, act);
  each_expert([&](int e, int64_t begin, int64_t end) {
    Tensor y_e = y.slice(0, begin, end);
    ops::matmul(act.slice(0, begin, end), lw.experts_down.select(e), y_e);
  });
  add_expert_adapter_rows(adapter_rows_, layout, Projection::Down, act, y, u);
  ops::scale_rows(y, weights);
  ops::scatter_add_rows(y, rows, out);
}

void Gemma4Model::mlp(int layer, Tensor& x) {
  const Gemma4Config& g = ck_.config;
  const ModelConfig& c = g.base;
  const Gemma4LayerWeights& lw = ck_.weights.layers[size_t(layer)];
  const int64_t n = x.dim(0), inter = g.layers[size_t(layer)].intermediate_size;
  Tensor h = buf_->h.rows(n, c.hidden_size);
  Tensor gate = buf_->gate.rows(n, inter);
  Tensor up = buf_->up.rows(n, inter);
  Tensor out = buf_->out.rows(n, c.hidden_size);
  const Tensor* ws[] = {&lw.w_gate, &lw.w_up};
  Tensor* ys[] = {&gate, &up};
  normed_group(x, {.weight = lw.pre_ffn_norm, .eps = c.rms_eps, .normed = h}, ws, ys, adapted());
  add_lora(layer, Projection::Gate, h, gate);
  add_lora(layer, Projection::Up, h, up);
  ops::gelu_tanh_mul(gate, up, gate);
  ops::matmul(gate, lw.w_down, out);
  add_lora(layer, Projection::Down, gate, out);
  if (g.moe) {
    ops::rms_norm(out, lw.post_ffn_norm_1, c.rms_eps, out);
    Tensor moe = buf_->moe_out.rows(n, c.hidden_size);
    experts(layer, x, moe);
    ops::rms_norm(moe, lw.post_ffn_norm_2, c.rms_eps, moe);
    ops::add(out, moe, out);
  }
  ops::rms_norm(out, lw.post_ffn_norm, c.rms_eps, out);
  ops::add(x, out, x);
}

void Gemma4Model::forward(const ForwardBatch& batch, KvCache& cache, Tensor& logits) {
  const ModelConfig& c = ck_.config.base;
  check_batch(batch, cache);
  const int64_t n_logits = batch.n_logit_rows();
  // Logits land where the caller's tensor lives (the host when it has none).
  const Device logits_device = logits.defined() ? logits.device() : Device::CPU;
  if (!logits.defined() || logits.rank() != 2 || logits.dim(0) != n_logits || logits.dim(1) != c.vocab_size ||
      logits.dtype() != DType::F32) {
    logits = ops::zeros(DType::F32, {std::max<int64_t>(n_logits, 1), c.vocab_size}, logits_device);
    if (n_logits == 0) logits = logits.slice(0, 0, 0);
  }
  if (batch.n_rows() > 0 && graphs_take(batch) && run_graph(batch, cache, logits, nullptr)) return;
  if (n_logits == 0 || logits.device() == device_) return forward_on_device(batch, cache, logits);
  // The model on the device, logits wanted on the host: one copy back.
  Tensor on_device = buf_->logits.rows(n_logits, c.vocab_size);
  forward_on_device(batch, cache, on_device);
  ops::copy(on_device, logits);
}

bool Gemma4Model::forward_from_device_tokens(const ForwardBatch& batch, const Tensor& tokens, KvCache& cache,
                                             Tensor& logits) {
  BRIOCHE_CHECK(tokens.device() == device_ && tokens.dtype() == DType::I32 && tokens.rank() == 1 &&
                    tokens.dim(0) == batch.n_rows(),
                "forward_from_device_tokens: expected i32 [", batch.n_rows(), "] on ", device_name(device_), ", got ",
                tokens.describe());
  check_batch(batch, cache);
  if (batch.n_rows() == 0 || !graphs_take(batch)) return false;
  const int64_t n_logits = batch.n_logit_rows(), vocab = ck_.config.base.vocab_size;
  if (!logits.defined() || logits.rank() != 2 || logits.dim(0) != n_logits || logits.dim(1) != vocab ||
      logits.dtype() != DType::F32)
    logits = ops::zeros(DType::F32, {std::max<int64_t>(n_logits, 1), vocab},
                        logits.defined() ? logits.device() : Device::CPU);
  return run_graph(batch, cache, logits, &tokens);
}

bool Gemma4Model::graphs_take(const ForwardBatch& batch) const {
  if (device_ != Device::CUDA || (ck_.config.moe && batch.n_rows() > kExpertMatmulRows)) return false;
  return table_takes(batch);
}

bool Gemma4Model::table_takes(const ForwardBatch& batch) const {
  return device_ == Device::CUDA &&
         std::none_of(batch.sequences.begin(), batch.sequences.end(), [&](const SequenceView& s) {
           if (s.adapter == nullptr) return false;
           for (int layer = 0; layer < ck_.config.base.n_layers; ++layer)
             if (s.adapter->adapts_experts(layer)) return true;
           return false;
         });
}

AdapterTable Gemma4Model::upload_adapter_table(const ForwardBatch& batch) {
  const int32_t rows = batch.n_rows(), n_layers = ck_.config.base.n_layers;
  const int32_t rank_cap = adapter_rank_cap(batch);
  const int32_t slots = int32_t(batch.sequences.size());
  const size_t words = adapter_table_words(rows, slots, n_layers);
  fill_adapter_table(batch, rows, slots, n_layers, lora_staging_.fill(words));
  if (!lora_table_block_.defined() || size_t(lora_table_block_.dim(0)) < words)
    lora_table_block_ = ops::zeros(DType::I32, {int64_t(words)}, device_);
  Tensor block = lora_table_block_.slice(0, 0, int64_t(words));
  lora_staging_.upload(block);
  Tensor u = buf_->lora_table_u.rows(rows, 3 * rank_cap);
  return adapter_table_views(block, rows, slots, n_layers, rank_cap, u);
}

bool Gemma4Model::run_graph(const ForwardBatch& batch, KvCache& cache, Tensor& logits, const Tensor* device_tokens) {
  const auto forward = [&](const ForwardBatch& padded, Activations&, Tensor& out, const AdapterTable* adapters) {
    // The bucket's scratch: a graph replays the addresses it recorded.
    Buffers& bucket = graph_buf_.try_emplace(padded.n_rows(), device_).first->second;
    struct Use {
      Buffers*& current;
      Buffers* before;
      ~Use() { current = before; }
    } use{buf_, buf_};
    buf_ = &bucket;
    forward_on_device(padded, cache, out, adapters);
  };
  return graphs_.run(batch, cache, logits, forward, device_tokens);
}

void Gemma4Model::forward_on_device(const ForwardBatch& batch, KvCache& cache, Tensor& logits,
                                    const AdapterTable* adapters) {
  const Gemma4Config& g = ck_.config;
  const ModelConfig& c = g.base;
  const Gemma4Weights& w = ck_.weights;
  const int64_t n = batch.n_rows(), n_logits = batch.n_logit_rows();
  if (n == 0) return;

  adapter_rows_.clear();
  adapter_rank_ = 0;
  for (const SequenceView& s : batch.sequences)
    if (s.adapter != nullptr && s.n_rows > 0) {
      adapter_rows_.push_back({.first_row = s.first_row, .n_rows = s.n_rows, .adapter = s.adapter});
      adapter_rank_ = std::max(adapter_rank_, s.adapter->rank);
    }
  // Adapter rows on CUDA take the adapters' table on the device (a decode
  // graph's, else uploaded now), unless an adapter adapts the MoE experts,
  // whose terms only the per-run path adds.
  AdapterTable uploaded;
  lora_table_ = adapters;
  if (lora_table_ == nullptr && !adapter_rows_.empty() && table_takes(batch)) {
    uploaded = upload_adapter_table(batch);
    lora_table_ = &uploaded;
  }
  struct Forget {  // the table lives for this forward only
    const AdapterTable*& table;
    ~Forget() { table = nullptr; }
  } forget{lora_table_};
  std::vector<ops::AttentionSequence> sequences;
  sequences.reserve(batch.sequences.size());
  for (const SequenceView& s : batch.sequences) sequences.push_back({s.first_row, s.n_rows, s.n_past, s.block_table});
  std::vector<ops::AttentionSequence> window_sequences;
  if (cache.n_window_blocks() > 0)
    for (const SequenceView& s : batch.sequences)
      window_sequences.push_back({s.first_row, s.n_rows, s.n_past, s.window_block_table});

  Tensor x = buf_->x.rows(n, c.hidden_size);  // [n, hidden] residual stream
  ops::embedding(w.token_embd, batch.tokens, x);
  ops::scale(x, float(std::sqrt(double(c.hidden_size))));
  Tensor ple;
  if (g.ple_dim > 0) ple = per_layer_inputs(batch, x);

  for (int layer = 0; layer < c.n_layers; ++layer) {
    const Gemma4LayerWeights& lw = w.layers[size_t(layer)];
    attention(layer, batch, sequences, window_sequences, cache, x);
    mlp(layer, x);
    if (g.ple_dim > 0) {
      const int64_t P = g.ple_dim;
      Tensor gate = buf_->ple_gate.rows(n, P);
      Tensor out = buf_->out.rows(n, c.hidden_size);
      ops::matmul(x, lw.ple_gate, gate);
      ops::gelu_tanh_mul(gate, ple.slice(1, layer * P, (layer + 1) * P), gate);
      ops::matmul(gate, lw.ple_proj, out);
      ops::rms_norm(out, lw.ple_post_norm, c.rms_eps, out);
      ops::add(x, out, x);
    }
    if (lw.layer_scalar != 1.0f) ops::scale(x, lw.layer_scalar);
  }
  if (n_logits == 0) return;

  // Only the rows that want logits go through the final norm and the head
  // (every row in a decode step: no gather).
  Tensor last = buf_->last.rows(n_logits, c.hidden_size);
  if (n_logits == n) {
    ops::rms_norm(x, w.output_norm, c.rms_eps, last);
  } else {
    std::vector<int32_t> wanted;
    for (int32_t r = 0; r < n; ++r)
      if (batch.wants_logits[size_t(r)]) wanted.push_back(r);
    ops::gather_rows(x, wanted, last);
    ops::rms_norm(last, w.output_norm, c.rms_eps, last);
  }
  ops::matmul(last, w.output, logits);
  if (g.final_logit_softcap > 0.0f) ops::softcap(logits, g.final_logit_softcap);
}

namespace {

void convert_matrices(Gemma4Weights& w, bool tied, DType dtype) {
  auto convert = [dtype](Tensor& t) {
    if (t.defined() && t.dtype() != dtype) t = ops::convert(t, dtype);
  };
  convert(w.token_embd);
  if (tied)
    w.output = w.token_embd;
  else
    convert(w.output);
  convert(w.ple_embd);
  convert(w.ple_model_proj);
  for (Gemma4LayerWeights& l : w.layers)
    for (Tensor* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down, &l.ple_gate, &l.ple_proj,
                      &l.router_proj, &l.experts_gate_up, &l.experts_down})
      convert(*t);
}

}  // namespace

void move_gemma4_weights(Gemma4Weights& w, bool tied_embeddings, Device device) {
  auto move = [device](Tensor& t) {
    if (t.defined()) t = ops::to_device(t, device);
  };
  move(w.token_embd);
  if (tied_embeddings)
    w.output = w.token_embd;
  else
    move(w.output);
  for (Tensor* t : {&w.output_norm, &w.ple_embd, &w.ple_model_proj, &w.ple_proj_norm}) move(*t);
  for (Gemma4LayerWeights& l : w.layers)
    for (Tensor Gemma4LayerWeights::*t : kGemma4LayerTensors) move(l.*t);
  ops::synchronize(device);
}

std::unique_ptr<Model> load_gemma4_model(const std::string& dir, const LoadOptions& options) {
  if (options.tp_size > 1)
    fail(dir, ": Gemma 4 runs without tensor parallelism in this build (asked for ", options.tp_size, " ranks)");
  if (options.adjust_checkpoint && !options.adjust_gemma4_checkpoint)
    fail(dir,
         ": Gemma 4 takes an adapter merged at load through adjust_gemma4_checkpoint (this caller gave only the "
         "Llama family's adjust_checkpoint)");
  Gemma4Checkpoint ck = load_gemma4_checkpoint(dir);
  if (options.adjust_gemma4_checkpoint) options.adjust_gemma4_checkpoint(ck);
  if (options.max_context > 0) ck.config.base.max_context = options.max_context;
  validate_model_config(ck.config.base, ConfigKeyNames::fields(), dir);
  if (options.convert_weights) {
    convert_matrices(ck.weights, ck.config.base.tied_embeddings, *options.convert_weights);
    ck.config.base.weight_dtype = *options.convert_weights;
  }
  if (ck.config.multimodal)
    std::fprintf(stderr,
                 "%s: a multimodal Gemma 4 checkpoint: loading its text model only (vision and audio "
                 "towers are not loaded)\n",
                 dir.c_str());
  if (options.device != Device::CPU) move_gemma4_weights(ck.weights, ck.config.base.tied_embeddings, options.device);
  return std::make_unique<Gemma4Model>(std::move(ck));
}

}  // namespace brioche::model
