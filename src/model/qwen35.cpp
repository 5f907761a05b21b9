// Qwen 3.5 (transformers' qwen3_5 and qwen3_5_moe text models):
//
//   x = embed(tokens)
//   for each layer:
//     h = rms_norm(x)·(1 + w)                      (zero-centred RMSNorm)
//     x = x + (linear layer ? gated_deltanet(h) : gated_attention(h))
//     h = rms_norm(x)·(1 + w)
//     x = x + (dense ? swiglu_mlp(h) : moe(h))
//   logits = lm_head(rms_norm(x)·(1 + w))
//
// gated_deltanet(h), per sequence with its state slot (KvCache::conv_state,
// recurrent_state):
//   q, k, v = split(silu(causal_conv1d(h·W_qkvᵀ)))    (depthwise, kernel K, state: last K-1 inputs)
//   g = −exp(A_log)·softplus(h·W_aᵀ + dt_bias),  β = sigmoid(h·W_bᵀ)
//   o = gated_delta_rule(q, k, v, g, β)            (ops/gated_delta_rule.h)
//   out = (rms_norm(o)·w_norm ⊙ silu(h·W_zᵀ)) · W_outᵀ   per value head (RMSNormGated)
// gated_attention(h):
//   [q | gate] = h·W_qᵀ per head;  k = h·W_kᵀ;  v = h·W_vᵀ
//   q, k = rms_norm per head·(1 + w), then RoPE on the first rotary_dim dims
//   out = (attention(q, K, V) ⊙ sigmoid(gate)) · W_oᵀ (causal GQA over the paged cache)
// moe(h): softmax router over experts, top-k renormalised to sum 1,
//   Σ_k w_k·expert_k(h) + sigmoid(h·w_sgᵀ)·shared_expert(h).
// Served LoRA adapters (unmerged, per sequence: model/served_adapter.h): the
// rows of a sequence with adapter (A, s·Bᵀ) get y += (x·Aᵀ)·(s·Bᵀ) on every
// projection it targets, right after the projection's matmul: q/k/v/o,
// in_proj_qkv/z/b/a, out_proj, the dense MLP's gate/up/down or the MoE
// block's shared expert's and its shared_expert_gate (peft's targets), and
// on the routed experts (experts.gate_up_proj, experts.down_proj) each
// expert's A_e, s·B_eᵀ for the rows routed to it.
#include "model/qwen35.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "ops/add.h"
#include "ops/attention.h"
#include "ops/causal_conv1d.h"
#include "ops/device.h"
#include "ops/embedding.h"
#include "ops/gated_delta_rule.h"
#include "ops/gather_rows.h"
#include "ops/quantize.h"
#include "ops/matmul.h"
#include "ops/moe.h"
#include "ops/rms_norm.h"
#include "ops/rope.h"
#include "ops/scaled_add.h"
#include "ops/sigmoid_gate.h"
#include "ops/swiglu.h"

namespace brioche::model {

namespace {

// h·W_gateᵀ, h·W_upᵀ, silu(gate)·up, ·W_downᵀ into `out` [n, hidden], on h's
// device; add_lora(p, x, y) adds the served adapters' terms to each
// projection's output y of input x (p: Gate, Up or Down).
template <typename AddLora>
void swiglu_mlp(const Tensor& h, const Qwen35Mlp& w, Tensor& out, AddLora&& add_lora) {
  const int64_t n = h.dim(0), inter = w.gate.dim(0);
  Tensor gate = ops::zeros(DType::F32, {n, inter}, h.device()), up = ops::zeros(DType::F32, {n, inter}, h.device());
  ops::matmul(h, w.gate, gate);
  add_lora(Projection::Gate, h, gate);
  ops::matmul(h, w.up, up);
  add_lora(Projection::Up, h, up);
  ops::swiglu(gate, up, gate);
  ops::matmul(gate, w.down, out);
  add_lora(Projection::Down, gate, out);
}

void swiglu_mlp(const Tensor& h, const Qwen35Mlp& w, Tensor& out) {
  swiglu_mlp(h, w, out, [](Projection, const Tensor&, Tensor&) {});
}

}  // namespace

Qwen35Model::Qwen35Model(Qwen35Checkpoint checkpoint)
    : ck_(std::move(checkpoint)),
      inv_freq_(ops::rope_inv_freq(ck_.qwen.rotary_dim, ck_.config.rope.theta, ck_.config.rope.scaling)),
      unit_expert_scales_(size_t(ck_.qwen.n_experts), 1.0f),
      device_(ck_.token_embd.defined() ? ck_.token_embd.device() : Device::CPU) {}

void move_qwen35_weights(Qwen35Checkpoint& ck, Device device) {
  auto move = [device](Tensor& t) {
    if (t.defined()) t = ops::to_device(t, device);
  };
  auto move_mlp = [&move](Qwen35Mlp& m) {
    for (Tensor* t : {&m.gate, &m.up, &m.down}) move(*t);
  };
  const bool tied = ck.output.defined() && ck.output.data() == ck.token_embd.data();
  move(ck.token_embd);
  move(ck.output_norm);
  if (tied)
    ck.output = ck.token_embd;
  else
    move(ck.output);
  for (Qwen35Layer& l : ck.layers) {
    Qwen35LinearAttention& a = l.linear;
    Qwen35FullAttention& f = l.full;
    for (Tensor* t :
         {&l.input_norm, &l.post_norm, &a.in_qkv, &a.in_z, &a.in_b, &a.in_a, &a.conv, &a.a_log, &a.dt_bias, &a.norm,
          &a.out, &f.wq, &f.wk, &f.wv, &f.wo, &f.q_norm, &f.k_norm, &l.router, &l.shared_expert_gate})
      move(*t);
    move_mlp(l.mlp);
    move_mlp(l.shared_expert);
    for (Qwen35Mlp& e : l.experts) move_mlp(e);
  }
}

std::unique_ptr<Model> load_qwen35_model(const std::string& dir, const LoadOptions& options) {
  if (options.tp_size > 1) fail(dir, ": Qwen 3.5 does not support --tensor-parallel in this build");
  if (options.adjust_checkpoint && !options.adjust_qwen35_checkpoint)
    fail(dir,
         ": Qwen 3.5 takes an adapter merged at load through adjust_qwen35_checkpoint (this caller gave only the "
         "Llama family's adjust_checkpoint)");
  Qwen35Checkpoint ck = load_qwen35_checkpoint(dir);
  if (options.adjust_qwen35_checkpoint) options.adjust_qwen35_checkpoint(ck);
  if (options.max_context > 0) ck.config.max_context = options.max_context;
  validate_model_config(ck.config, ConfigKeyNames::fields(), dir);
  if (options.convert_weights) {
    const DType dtype = *options.convert_weights;
    auto convert = [dtype](Tensor& t) {
      if (t.defined() && t.dtype() != dtype) t = ops::convert(t, dtype);
    };
    convert(ck.token_embd);
    if (ck.config.tied_embeddings)
      ck.output = ck.token_embd;
    else
      convert(ck.output);
    for (Qwen35Layer& l : ck.layers) {
      for (Tensor* t : {&l.linear.in_qkv, &l.linear.in_z, &l.linear.in_b, &l.linear.in_a, &l.linear.out, &l.full.wq,
                        &l.full.wk, &l.full.wv, &l.full.wo, &l.router, &l.shared_expert_gate})
        convert(*t);
      for (Qwen35Mlp* m : {&l.mlp, &l.shared_expert})
        for (Tensor* t : {&m->gate, &m->up, &m->down}) convert(*t);
      for (Qwen35Mlp& m : l.experts)
        for (Tensor* t : {&m.gate, &m.up, &m.down}) convert(*t);
    }
    ck.config.weight_dtype = dtype;
  }
  if (options.device != Device::CPU) move_qwen35_weights(ck, options.device);
  return std::make_unique<Qwen35Model>(std::move(ck));
}

size_t Qwen35Model::weight_bytes() const {
  size_t n = ck_.token_embd.nbytes() + ck_.output_norm.nbytes();
  if (!ck_.config.tied_embeddings) n += ck_.output.nbytes();
  auto mlp_bytes = [](const Qwen35Mlp& m) { return m.gate.nbytes() + m.up.nbytes() + m.down.nbytes(); };
  for (const Qwen35Layer& l : ck_.layers) {
    const Qwen35LinearAttention& a = l.linear;
    const Qwen35FullAttention& f = l.full;
    for (const Tensor* t :
         {&l.input_norm, &l.post_norm, &a.in_qkv, &a.in_z, &a.in_b, &a.in_a, &a.conv, &a.a_log, &a.dt_bias, &a.norm,
          &a.out, &f.wq, &f.wk, &f.wv, &f.wo, &f.q_norm, &f.k_norm, &l.router, &l.shared_expert_gate})
      n += t->nbytes();
    n += mlp_bytes(l.mlp) + mlp_bytes(l.shared_expert);
    for (const Qwen35Mlp& e : l.experts) n += mlp_bytes(e);
  }
  return n;
}

void Qwen35Model::check_batch(const ForwardBatch& batch, const KvCache& cache) const {
  const ModelConfig& c = ck_.config;
  check_batch_rows(batch, c.vocab_size);
  BRIOCHE_CHECK(cache.device() == device_, "forward: the KV cache is on ", device_name(cache.device()),
                " but the model is on ", device_name(device_), " (set KvCacheOptions::device to Model::device())");
  BRIOCHE_CHECK(cache.n_layers() == c.n_layers, "forward: KV cache of ", cache.n_layers(),
                " layers does not fit the model (", c.n_layers, " layers)");
  for (int l = 0; l < c.n_layers; ++l) {
    const KvLayerShape shape = c.kv_shape(l);
    const bool linear = ck_.qwen.linear_layers[size_t(l)];
    const Tensor& keys = const_cast<KvCache&>(cache).keys(l);
    BRIOCHE_CHECK(linear || (keys.defined() && keys.dim(2) == shape.n_kv_heads && keys.dim(3) == shape.head_dim),
                  "forward: KV cache layer ", l, " is ", keys.defined() ? keys.describe() : std::string("empty"),
                  ", the model's full-attention layer needs ", shape.n_kv_heads, " kv heads of ", shape.head_dim,
                  " (build the cache from this model's config)");
    BRIOCHE_CHECK(
        !linear || const_cast<KvCache&>(cache).recurrent_state(l).defined(), "forward: KV cache layer ", l,
        " has no recurrent state slots (KvCacheOptions::n_state_slots), which the linear-attention layer needs");
  }
  for (size_t s = 0; s < batch.sequences.size(); ++s) {
    const SequenceView& seq = batch.sequences[s];
    BRIOCHE_CHECK(seq.adapter == nullptr || int(seq.adapter->layers.size()) == c.n_layers, "forward: sequence ", s,
                  "'s LoRA adapter has ", seq.adapter ? seq.adapter->layers.size() : 0, " layers, the model ",
                  c.n_layers);
    BRIOCHE_CHECK(seq.n_rows == 0 || (seq.state_slot >= 0 && seq.state_slot < cache.n_state_slots()),
                  "forward: sequence ", s, " has state slot ", seq.state_slot, ", expected one in [0, ",
                  cache.n_state_slots(), ") (hybrid models keep a recurrent state per sequence)");
    for (size_t t = 0; t < s; ++t)
      BRIOCHE_CHECK(
          seq.n_rows == 0 || batch.sequences[t].n_rows == 0 || batch.sequences[t].state_slot != seq.state_slot,
          "forward: sequences ", t, " and ", s, " share state slot ", seq.state_slot);
  }
}

void Qwen35Model::forward(const ForwardBatch& batch, KvCache& cache, Tensor& logits) {
  const ModelConfig& c = ck_.config;
  const Qwen35Config& q = ck_.qwen;
  check_batch(batch, cache);
  const int64_t n = batch.n_rows(), n_logits = batch.n_logit_rows();
  // Logits stay where the caller's tensor lives (host by default).
  const Device logits_device = logits.defined() ? logits.device() : Device::CPU;
  BRIOCHE_CHECK(logits_device == Device::CPU || logits_device == device_, "forward: logits on ",
                device_name(logits_device), ", expected the host or the model's device (", device_name(device_), ")");
  if (!logits.defined() || logits.rank() != 2 || logits.dim(0) != n_logits || logits.dim(1) != c.vocab_size ||
      logits.dtype() != DType::F32) {
    logits = ops::zeros(DType::F32, {std::max<int64_t>(n_logits, 1), c.vocab_size}, logits_device);
    if (n_logits == 0) logits = logits.slice(0, 0, 0);
  }
  if (n == 0) return;

  // Served adapters: the rows of each sequence that names one, in row order.
  adapter_rows_.clear();
  int32_t adapter_rank = 0;
  for (const SequenceView& s : batch.sequences)
    if (s.adapter != nullptr && s.n_rows > 0) {
      adapter_rows_.push_back({.first_row = s.first_row, .n_rows = s.n_rows, .adapter = s.adapter});
      adapter_rank = std::max(adapter_rank, s.adapter->rank);
    }
  std::sort(adapter_rows_.begin(), adapter_rows_.end(),
            [](const AdapterRows& a, const AdapterRows& b) { return a.first_row < b.first_row; });
  lora_u_ = adapter_rows_.empty() ? Tensor() : buffer({n, adapter_rank});

  std::vector<ops::AttentionSequence> attention_seqs;
  std::vector<ops::RecurrentSequence> recurrent_seqs;
  for (const SequenceView& s : batch.sequences) {
    if (s.n_rows == 0) continue;
    attention_seqs.push_back({s.first_row, s.n_rows, s.n_past, s.block_table});
    recurrent_seqs.push_back({.first_row = s.first_row,
                              .n_rows = s.n_rows,
                              .state_slot = s.state_slot,
                              .starts = s.n_past == 0,
                              .first_position = s.n_past,
                              .splits = s.state_splits,
                              .checkpoints = s.state_checkpoints});
  }
  // RoPE on the first rotary_dim dims of each head: the op sees one row per
  // (token, head), so each head's row carries its token's position.
  const int64_t heads = c.n_heads, kv_heads = c.n_kv_heads, d = c.head_dim;
  std::vector<int32_t> q_positions(size_t(n * heads)), k_positions(size_t(n * kv_heads));
  for (int64_t r = 0; r < n; ++r) {
    std::fill_n(q_positions.begin() + r * heads, heads, batch.positions[size_t(r)]);
    std::fill_n(k_positions.begin() + r * kv_heads, kv_heads, batch.positions[size_t(r)]);
  }
  const ops::RopeParams rope{
      .style = ops::RopeStyle::NeoX, .n_heads = 1, .head_dim = q.rotary_dim, .inv_freq = inv_freq_};

  const int64_t hidden = c.hidden_size;
  Tensor x = buffer({n, hidden}), h = buffer({n, hidden}), out = buffer({n, hidden});
  ops::embedding(ck_.token_embd, batch.tokens, x);
  for (int layer = 0; layer < c.n_layers; ++layer) {
    const Qwen35Layer& w = ck_.layers[size_t(layer)];
    ops::rms_norm(x, w.input_norm, c.rms_eps, h);
    if (q.linear_layers[size_t(layer)]) {
      const Qwen35LinearAttention& la = w.linear;
      const int64_t kw = q.key_width(), vw = q.value_width(), vh = q.linear_v_heads;
      Tensor qkv = buffer({n, q.conv_channels()}), mixed = buffer({n, q.conv_channels()});
      Tensor z = buffer({n, vw}), a = buffer({n, vh}), b = buffer({n, vh}), g = buffer({n, vh}), beta = buffer({n, vh});
      ops::matmul(h, la.in_qkv, qkv);
      ops::matmul(h, la.in_z, z);
      ops::matmul(h, la.in_b, b);
      ops::matmul(h, la.in_a, a);
      add_lora(layer, Projection::LinearQkv, h, qkv);
      add_lora(layer, Projection::LinearZ, h, z);
      add_lora(layer, Projection::LinearB, h, b);
      add_lora(layer, Projection::LinearA, h, a);
      ops::causal_conv1d_silu(qkv, la.conv, recurrent_seqs, cache.conv_state(layer), mixed);
      ops::delta_rule_gates(a, b, {.a_log = la.a_log, .dt_bias = la.dt_bias}, g, beta);
      Tensor core = buffer({n, vw});
      ops::gated_delta_rule({.q = mixed.slice(1, 0, kw),
                             .k = mixed.slice(1, kw, 2 * kw),
                             .v = mixed.slice(1, 2 * kw, 2 * kw + vw),
                             .g = g,
                             .beta = beta},
                            {.n_k_heads = q.linear_k_heads,
                             .n_v_heads = q.linear_v_heads,
                             .key_dim = q.linear_key_dim,
                             .value_dim = q.linear_value_dim},
                            recurrent_seqs, cache.recurrent_state(layer), core);
      // RMSNormGated per value head: rms_norm(o)·w, then ·silu(z).
      Tensor core_heads = core.reshape({n * vh, q.linear_value_dim});
      ops::rms_norm(core_heads, la.norm, c.rms_eps, core_heads);
      ops::swiglu(z, core, core);
      ops::matmul(core, la.out, out);
      add_lora(layer, Projection::LinearOut, core, out);
    } else {
      const Qwen35FullAttention& fa = w.full;
      Tensor q_gate = buffer({n, heads * 2 * d}), qs = buffer({n, heads * d}), k = buffer({n, kv_heads * d}),
             v = buffer({n, kv_heads * d}), attn = buffer({n, heads * d});
      ops::matmul(h, fa.wq, q_gate);
      ops::matmul(h, fa.wk, k);
      ops::matmul(h, fa.wv, v);
      add_lora(layer, Projection::Q, h, q_gate);  // [query | gate] rows per head, as peft's q_proj
      add_lora(layer, Projection::K, h, k);
      add_lora(layer, Projection::V, h, v);
      const Tensor per_head = q_gate.reshape({n * heads, 2 * d});  // [query | gate] per head
      Tensor q_heads = qs.reshape({n * heads, d}), k_heads = k.reshape({n * kv_heads, d});
      ops::rms_norm(per_head.slice(1, 0, d), fa.q_norm, c.rms_eps, q_heads);
      ops::rms_norm(k_heads, fa.k_norm, c.rms_eps, k_heads);
      Tensor q_rot = q_heads.slice(1, 0, q.rotary_dim), k_rot = k_heads.slice(1, 0, q.rotary_dim);
      ops::rope(q_rot, q_positions, rope);
      ops::rope(k_rot, k_positions, rope);
      ops::store_kv(k, v, attention_seqs, cache.keys(layer), cache.values(layer));
      ops::paged_attention(qs, {.k = cache.keys(layer), .v = cache.values(layer), .sequences = attention_seqs},
                           {.n_heads = c.n_heads,
                            .n_kv_heads = c.n_kv_heads,
                            .head_dim = c.head_dim,
                            .scale = 1.0f / std::sqrt(float(d))},
                           attn);
      Tensor attn_heads = attn.reshape({n * heads, d});
      ops::sigmoid_gate(per_head.slice(1, d, 2 * d), attn_heads);
      ops::matmul(attn, fa.wo, out);
      add_lora(layer, Projection::O, attn, out);
    }
    ops::add(x, out, x);

    ops::rms_norm(x, w.post_norm, c.rms_eps, h);
    if (q.n_experts == 0) {
      swiglu_mlp(h, w.mlp, out, [&](Projection p, const Tensor& in, Tensor& y) { add_lora(layer, p, in, y); });
    } else if (device_ != Device::CPU) {
      moe_on_device(layer, h, w, out);
    } else {
      // Router: softmax over experts, the top k renormalised to sum 1
      // (ops::moe_route with unit expert scales); rows grouped per expert.
      const int64_t experts = q.n_experts, top_k = q.experts_per_token;
      Tensor router = buffer({n, experts});
      ops::matmul(h, w.router, router);
      const ops::MoeRouting routing = ops::moe_route(router, int(top_k), unit_expert_scales_);
      std::vector<std::vector<std::pair<int64_t, float>>> routed(static_cast<size_t>(experts));  // (row, weight)
      for (int64_t r = 0; r < n; ++r)
        for (int64_t i = 0; i < top_k; ++i)
          routed[size_t(routing.expert[size_t(r * top_k + i)])].push_back({r, routing.weight[size_t(r * top_k + i)]});
      std::fill_n(out.data_as<float>(), n * hidden, 0.0f);
      // out[row] += weight · y[i] for each of the expert's rows, experts in order.
      const auto accumulate = [&](const std::vector<std::pair<int64_t, float>>& rows, const Tensor& y) {
        for (int64_t i = 0; i < int64_t(rows.size()); ++i) {
          float* dst = out.row_as<float>(rows[size_t(i)].first);
          const float* src = y.row_as<float>(i);
          const float weight = rows[size_t(i)].second;
          for (int64_t j = 0; j < hidden; ++j) dst[j] += src[j] * weight;
        }
      };
      if (any_adapts_experts(adapter_rows_, layer)) {
        // The routed rows gathered by expert once (ExpertRows), the experts with the adapters' terms.
        std::vector<int32_t> rows;
        std::vector<int64_t> first;
        for (const auto& expert_rows : routed) {
          first.push_back(int64_t(rows.size()));
          for (const auto& [row, weight] : expert_rows) rows.push_back(int32_t(row));
        }
        first.push_back(int64_t(rows.size()));
        Tensor in = buffer({int64_t(rows.size()), hidden}), y = buffer({int64_t(rows.size()), hidden});
        ops::gather_rows(h, rows, in);
        routed_experts_with_adapters(layer, w, {.layer = layer, .batch_rows = rows, .expert_first = first}, in, y);
        for (int64_t e = 0; e < experts; ++e)
          accumulate(routed[size_t(e)], y.slice(0, first[size_t(e)], first[size_t(e) + 1]));
      } else {
        for (int64_t e = 0; e < experts; ++e) {
          const auto& rows = routed[size_t(e)];
          if (rows.empty()) continue;
          const int64_t m = int64_t(rows.size());
          Tensor in = buffer({m, hidden}), y = buffer({m, hidden});
          for (int64_t i = 0; i < m; ++i)
            std::copy_n(h.row_as<float>(rows[size_t(i)].first), hidden, in.row_as<float>(i));
          swiglu_mlp(in, w.experts[size_t(e)], y);
          accumulate(rows, y);
        }
      }
      shared_expert(layer, h, w, out);
    }
    ops::add(x, out, x);
  }
  if (n_logits == 0) return;

  // Only rows that want logits go through the final norm and the lm_head.
  std::vector<int32_t> logit_rows;
  for (int64_t r = 0; r < n; ++r)
    if (batch.wants_logits[size_t(r)]) logit_rows.push_back(int32_t(r));
  Tensor rows = buffer({n_logits, hidden});
  ops::gather_rows(x, logit_rows, rows);
  ops::rms_norm(rows, ck_.output_norm, c.rms_eps, rows);
  if (logits.device() == device_) return ops::matmul(rows, ck_.output, logits);
  // Model on the device, logits wanted on the host: one copy back.
  Tensor device_logits = buffer({n_logits, c.vocab_size});
  ops::matmul(rows, ck_.output, device_logits);
  ops::copy(device_logits, logits);
}

void Qwen35Model::add_lora(int layer, Projection p, const Tensor& x, Tensor& y) {
  if (!adapter_rows_.empty()) add_adapter_rows(adapter_rows_, {.layer = layer, .projection = p}, x, y, lora_u_);
}

Tensor Qwen35Model::buffer(std::initializer_list<int64_t> shape) const {
  return device_ == Device::CPU ? Tensor::zeros(DType::F32, shape) : ops::zeros(DType::F32, shape, device_);
}

// The MoE block on a device: the router's logits come back to the host for
// the routing (ops::moe_route); the routed rows, grouped by expert (rows
// ascending in each), are gathered once; each chosen expert runs on its
// rows only (at ≤ 8 rows a GEMV that reads only that expert's weights),
// its outputs are scaled by the routing weights and added to their rows in
// expert order, as the CPU loop adds them.
void Qwen35Model::moe_on_device(int layer, const Tensor& h, const Qwen35Layer& w, Tensor& out) {
  const Qwen35Config& q = ck_.qwen;
  const int64_t n = h.dim(0), hidden = h.dim(1), experts = q.n_experts, top_k = q.experts_per_token;
  Tensor router = buffer({n, experts});
  ops::matmul(h, w.router, router);
  const ops::MoeRouting routing =
      ops::moe_route(ops::to_device(router, Device::CPU), int(top_k), unit_expert_scales_);  // (waits for it)
  std::vector<std::vector<std::pair<int32_t, float>>> routed(static_cast<size_t>(experts));  // (row, weight)
  for (int64_t r = 0; r < n; ++r)
    for (int64_t i = 0; i < top_k; ++i)
      routed[size_t(routing.expert[size_t(r * top_k + i)])].push_back(
          {int32_t(r), routing.weight[size_t(r * top_k + i)]});
  std::vector<int32_t> rows;
  std::vector<float> weights;
  for (const auto& expert_rows : routed)
    for (const auto& [row, weight] : expert_rows) {
      rows.push_back(row);
      weights.push_back(weight);
    }
  const int64_t total = int64_t(rows.size());
  Tensor in = buffer({total, hidden}), y = buffer({total, hidden});
  ops::gather_rows(h, rows, in);
  if (any_adapts_experts(adapter_rows_, layer)) {
    std::vector<int64_t> first;
    for (int64_t e = 0, at = 0; e < experts; at += int64_t(routed[size_t(e)].size()), ++e) first.push_back(at);
    first.push_back(total);
    routed_experts_with_adapters(layer, w, {.layer = layer, .batch_rows = rows, .expert_first = first}, in, y);
  } else {
    for (int64_t e = 0, first = 0; e < experts; ++e) {
      const int64_t m = int64_t(routed[size_t(e)].size());
      if (m == 0) continue;
      Tensor y_e = y.slice(0, first, first + m);
      swiglu_mlp(in.slice(0, first, first + m), w.experts[size_t(e)], y_e);
      first += m;
    }
  }
  ops::scale_rows(y, weights);
  ops::fill(out, 0.0f);
  ops::scatter_add_rows(y, rows, out);
  shared_expert(layer, h, w, out);
}

void Qwen35Model::shared_expert(int layer, const Tensor& h, const Qwen35Layer& w, Tensor& out) {
  if (!w.shared_expert.gate.defined()) return;
  const int64_t n = h.dim(0), hidden = h.dim(1);
  Tensor shared = buffer({n, hidden}), gate = buffer({n, 1});
  const auto add = [&](Projection p, const Tensor& x, Tensor& y) { add_lora(layer, p, x, y); };
  swiglu_mlp(h, w.shared_expert, shared, add);
  ops::matmul(h, w.shared_expert_gate, gate);
  add_lora(layer, Projection::SharedExpertGate, h, gate);
  ops::sigmoid_gate(gate, shared);
  ops::add(out, shared, out);
}

void Qwen35Model::routed_experts_with_adapters(int layer, const Qwen35Layer& w, const ExpertRows& rows,
                                               const Tensor& in, Tensor& y) {
  const int64_t total = in.dim(0), inter = ck_.qwen.expert_intermediate;
  Tensor gate = buffer({total, inter}), up = buffer({total, inter});
  Tensor u = buffer({total, std::max<int64_t>(lora_u_.dim(1), 1)});
  const auto each_expert = [&](auto&& run) {
    for (size_t e = 0; e + 1 < rows.expert_first.size(); ++e)
      if (rows.expert_first[e + 1] > rows.expert_first[e])
        run(w.experts[e], rows.expert_first[e], rows.expert_first[e + 1]);
  };
  each_expert([&](const Qwen35Mlp& expert, int64_t begin, int64_t end) {
    Tensor gate_e = gate.slice(0, begin, end), up_e = up.slice(0, begin, end);
    const Tensor in_e = in.slice(0, begin, end);
    ops::matmul(in_e, expert.gate, gate_e);
    ops::matmul(in_e, expert.up, up_e);
  });
  add_expert_gate_up_adapter_rows(adapter_rows_, rows, in, gate, up, u);
  ops::swiglu(gate, up, gate);
  each_expert([&](const Qwen35Mlp& expert, int64_t begin, int64_t end) {
    Tensor y_e = y.slice(0, begin, end);
    ops::matmul(gate.slice(0, begin, end), expert.down, y_e);
  });
  add_expert_adapter_rows(adapter_rows_, rows, Projection::Down, gate, y, u);
}

}  // namespace brioche::model
