#include "model/blocks.h"

#include <array>
#include <cmath>
#include <span>
#include <vector>

#include "core/error.h"
#include "ops/add.h"
#include "ops/device.h"
#include "ops/fused_matmul.h"
#include "ops/lora_rows.h"
#include "ops/matmul.h"
#include "ops/rms_norm.h"
#include "ops/rope.h"
#include "ops/swiglu.h"

namespace brioche::model {

Activations ActivationBuffers::view(const ModelConfig& c, int64_t n, Device device) {
  if (n > capacity_ || device != device_) {
    capacity_ = std::max<int64_t>(n, 1);
    device_ = device;
    auto make = [&](int64_t width) { return ops::zeros(DType::F32, {capacity_, width}, device); };
    full_.x = make(c.hidden_size);
    full_.h = make(c.hidden_size);
    if (c.qk_norm) {
      // Qwen3 normalizes q and k per head through a [n·heads, head_dim]
      // reshape, which needs contiguous rows.
      full_.q = make(c.q_dim());
      full_.k = make(c.kv_dim());
      full_.v = make(c.kv_dim());
    } else {
      // q, k and v side by side in one row: where the device stacks the
      // weights (model/device_weights.cpp), one GEMM writes all three in place.
      const Tensor qkv = make(c.q_dim() + 2 * c.kv_dim());
      full_.q = qkv.slice(1, 0, c.q_dim());
      full_.k = qkv.slice(1, c.q_dim(), c.q_dim() + c.kv_dim());
      full_.v = qkv.slice(1, c.q_dim() + c.kv_dim(), c.q_dim() + 2 * c.kv_dim());
    }
    full_.attn = make(c.q_dim());
    full_.out = make(c.hidden_size);
    full_.gate = make(c.intermediate_size);
    full_.up = make(c.intermediate_size);
  }
  auto rows = [n](const Tensor& t) { return t.slice(0, 0, n); };
  return {rows(full_.x),    rows(full_.h),   rows(full_.q),    rows(full_.k), rows(full_.v),
          rows(full_.attn), rows(full_.out), rows(full_.gate), rows(full_.up)};
}

namespace {

using ReadAhead = std::span<const cpu::ByteRange>;

struct LoraOutput {
  Projection projection;
  Tensor* y;
};

// The table path's parts of 1–3 projections of one x (no allocation per call).
struct TableParts {
  std::array<ops::LoraTablePart, 3> storage;
  size_t n = 0;
  TableParts(const LayerLora& lora, std::initializer_list<LoraOutput> outputs) {
    for (const LoraOutput& o : outputs)
      storage[n++] = {.entry = lora.layer * kBlockProjections + int32_t(o.projection), .y = o.y};
  }
  std::span<const ops::LoraTablePart> span() const { return {storage.data(), n}; }
};

// base(terms): the base model's projection of x into each output, adding
// `terms` (the adapters' low-rank terms) where they are given; then, without
// a table, y += the low-rank term of each projection for the rows whose
// adapter has one: 1–3 projections of one x. With a table (the GPU's path)
// the shrink reads only x, so it runs before the base projection (in the
// dependent-launch chain it overlaps the GEMV's weight prefetch instead of
// waiting for its last write), and the base projection adds the terms in
// its own store: no expand launch.
// The table path alone: the shrink of x (of RMSNorm(x)·norm.weight when a
// norm is given, for a base projection that normalises x in its own GEMV),
// then base(&terms).
template <typename BaseProjection>
void project_with_table(const LayerLora& lora, const Tensor& x, const ops::LoraInputNorm* norm,
                        std::initializer_list<LoraOutput> outputs, BaseProjection&& base) {
  const TableParts parts(lora, outputs);
  Tensor u = lora.table->u;
  const ops::LoraTable table = lora.table->table();
  if (norm != nullptr)
    ops::lora_table_shrink(x, *norm, table, parts.span(), u);
  else
    ops::lora_table_shrink(x, table, parts.span(), u);
  const ops::LoraTerms terms{.table = table, .parts = parts.span(), .u_scratch = u};
  base(&terms);
}

// base(terms, read_ahead): the base projection of x into the outputs. With
// a table, base(&terms, {}) (project_with_table); without (the CPU's path),
// base(nullptr, the adapters' factor bytes): the projection requests them
// while its dot products run (ops::lora_rows_read_ahead), then the
// adapters' terms are added, reading them from cache.
template <typename BaseProjection>
void project_with_lora(const LayerLora& lora, const Tensor& x, std::initializer_list<LoraOutput> outputs,
                       BaseProjection&& base) {
  if (lora.table != nullptr)
    return project_with_table(lora, x, nullptr, outputs,
                              [&](const ops::LoraTerms* terms) { base(terms, ReadAhead{}); });
  // One call for the projections of this x: on the CPU one pool dispatch
  // for all of them.
  std::vector<ops::LoraRows> segments[3];
  std::vector<ops::LoraRowsPart> parts;
  for (const LoraOutput& o : outputs) {
    std::vector<ops::LoraRows>& s = segments[parts.size()];
    for (const AdapterRows& rows : lora.rows) {
      if (const AdapterProjection* ap = rows.adapter->projection(lora.layer, o.projection))
        s.push_back({.first_row = rows.first_row, .n_rows = rows.n_rows, .a = &ap->a, .bt = &ap->bt});
    }
    parts.push_back({.segments = s, .y = o.y});
  }
  std::array<cpu::ByteRange, ops::kLoraReadAheadRanges> read_ahead;
  base(nullptr, ops::lora_rows_read_ahead(parts, read_ahead));
  ops::lora_rows_add_group(x, parts, *lora.u_scratch);
}

}  // namespace

void attention_block(const BlockContext& ctx, const LayerWeights& w, const LayerKvCache& cache, Activations& a,
                     const LayerLora& lora) {
  const ModelConfig& c = ctx.config;
  const int64_t n = a.h.dim(0);
  const Tensor* qkv_w[] = {&w.wq, &w.wk, &w.wv};
  Tensor* qkv[] = {&a.q, &a.k, &a.v};
  const bool adapted = lora.adapted();
  if (adapted) {
    BRIOCHE_CHECK(ctx.collective == nullptr, "attention_block: adapters are not served with tensor parallelism");
    const std::initializer_list<LoraOutput> outputs = {
        {Projection::Q, &a.q}, {Projection::K, &a.k}, {Projection::V, &a.v}};
    if (lora.table != nullptr) {
      // The shrink normalises x itself and the GEMVs keep their fused norm:
      // x̂ is never written and no norm kernel runs apart.
      const ops::LoraInputNorm norm{.weight = w.attn_norm, .eps = c.rms_eps};
      project_with_table(lora, a.x, &norm, outputs, [&](const ops::LoraTerms* terms) {
        ops::matmul_group(a.x, {.weight = w.attn_norm, .eps = c.rms_eps, .normed = a.h}, qkv_w, qkv, terms);
      });
    } else {
      ops::rms_norm(a.x, w.attn_norm, c.rms_eps, a.h);
      project_with_lora(lora, a.h, outputs, [&](const ops::LoraTerms* terms, ReadAhead read_ahead) {
        ops::matmul_group(a.h, qkv_w, qkv, terms, read_ahead);
      });
    }
  } else {
    ops::matmul_group(a.x, {.weight = w.attn_norm, .eps = c.rms_eps, .normed = a.h, .handoff = ctx.norm_handoff}, qkv_w,
                      qkv);
  }
  if (w.bq.defined()) ops::add_bias(a.q, w.bq);
  if (w.bk.defined()) ops::add_bias(a.k, w.bk);
  if (w.bv.defined()) ops::add_bias(a.v, w.bv);
  if (w.q_norm.defined()) {
    // Qwen3: RMSNorm over each head's head_dim values, before RoPE.
    Tensor q_heads = a.q.reshape({n * c.n_heads, c.head_dim});
    Tensor k_heads = a.k.reshape({n * c.n_kv_heads, c.head_dim});
    ops::rms_norm(q_heads, w.q_norm, c.rms_eps, q_heads);
    ops::rms_norm(k_heads, w.k_norm, c.rms_eps, k_heads);
  }
  const ops::RopeParams rope{
      .style = c.rope.style, .n_heads = c.n_heads, .head_dim = c.head_dim, .inv_freq = ctx.inv_freq};
  const ops::RopeStoreKvFirst first{.k = a.k, .v = a.v, .positions = ctx.positions, .q_rope = rope};
  const ops::PagedKvCache paged{.k = cache.k, .v = cache.v, .sequences = ctx.sequences};
  const ops::AttentionParams params{.n_heads = c.n_heads,
                                    .n_kv_heads = c.n_kv_heads,
                                    .head_dim = c.head_dim,
                                    .scale = 1.0f / std::sqrt(float(c.head_dim)),
                                    .sliding_window = c.sliding_window};
  if (ctx.collective == nullptr && !w.bo.defined() && !adapted) {
    // a.x += attention·woᵀ: the residual add in the projection.
    return ops::paged_attention(a.q, first, paged, params,
                                {.x = a.attn, .w = w.wo, .y = a.x, .scratch = a.out, .hand_on = ctx.norm_handoff});
  }
  ops::paged_attention(a.q, first, paged, params, a.attn);
  if (adapted && !w.bo.defined()) {
    // a.x += attention·woᵀ, then each adapter row's low-rank term.
    return project_with_lora(
        lora, a.attn, {{Projection::O, &a.x}}, [&](const ops::LoraTerms* terms, ReadAhead read_ahead) {
          ops::matmul_accumulate(a.attn, w.wo, a.x, a.out, {.lora = terms, .read_ahead = read_ahead});
        });
  }
  if (ctx.collective != nullptr) {
    // out = Σ_ranks attn_r·wo_rᵀ, then the bias once.
    ops::matmul(a.attn, w.wo, a.out);
    ctx.collective->all_reduce_sum(a.out);
    if (w.bo.defined()) ops::add_bias(a.out, w.bo);
  } else {
    if (adapted) {
      const Tensor* wo[] = {&w.wo};
      Tensor* out[] = {&a.out};
      project_with_lora(lora, a.attn, {{Projection::O, &a.out}},
                        [&](const ops::LoraTerms* terms, ReadAhead read_ahead) {
                          ops::matmul_group(a.attn, wo, out, terms, read_ahead);
                        });
    } else {
      ops::matmul(a.attn, w.wo, a.out);
    }
    if (w.bo.defined()) ops::add_bias(a.out, w.bo);
  }
  ops::add(a.x, a.out, a.x);
}

void mlp_block(const BlockContext& ctx, const LayerWeights& w, Activations& a, const LayerLora& lora) {
  const ModelConfig& c = ctx.config;
  ops::Collective* collective = ctx.collective;
  if (lora.adapted()) {
    BRIOCHE_CHECK(collective == nullptr, "mlp_block: adapters are not served with tensor parallelism");
    const Tensor* gate_up_w[] = {&w.w_gate, &w.w_up};
    Tensor* gate_up[] = {&a.gate, &a.up};
    const std::initializer_list<LoraOutput> outputs = {{Projection::Gate, &a.gate}, {Projection::Up, &a.up}};
    if (lora.table != nullptr) {
      // As for Q/K/V (attention_block), the terms added before the SwiGLU
      // inside the fused gate/up GEMV.
      const ops::LoraInputNorm norm{.weight = w.ffn_norm, .eps = c.rms_eps};
      project_with_table(lora, a.x, &norm, outputs, [&](const ops::LoraTerms* terms) {
        ops::swiglu_matmul(a.x, {.weight = w.ffn_norm, .eps = c.rms_eps, .normed = a.h},
                           {.gate = w.w_gate, .up = w.w_up}, a.gate, a.up, terms);
      });
    } else {
      ops::rms_norm(a.x, w.ffn_norm, c.rms_eps, a.h);
      project_with_lora(lora, a.h, outputs, [&](const ops::LoraTerms* terms, ReadAhead read_ahead) {
        ops::matmul_group(a.h, gate_up_w, gate_up, terms, read_ahead);
      });
      ops::swiglu(a.gate, a.up, a.gate);
    }
    // a.x += swiglu·w_downᵀ with each adapter row's low-rank term.
    return project_with_lora(
        lora, a.gate, {{Projection::Down, &a.x}}, [&](const ops::LoraTerms* terms, ReadAhead read_ahead) {
          ops::matmul_accumulate(a.gate, w.w_down, a.x, a.out, {.lora = terms, .read_ahead = read_ahead});
        });
  }
  const ops::RmsNormFirst norm{.weight = w.ffn_norm, .eps = c.rms_eps, .normed = a.h, .handoff = ctx.norm_handoff};
  const ops::SwigluMlp mlp{.w_gate = w.w_gate,
                           .w_up = w.w_up,
                           .w_down = w.w_down,
                           .hidden = a.gate,
                           .scratch = a.up,
                           .y_scratch = a.out,
                           .output = collective == nullptr ? ops::MlpOutput::AddToY : ops::MlpOutput::WriteY};
  if (collective == nullptr) return ops::swiglu_mlp(a.x, norm, mlp, a.x);
  // SwiGLU is elementwise over the intermediate columns, so each rank's slice
  // is exact; only down's sum over them is split. The same op as without
  // ranks (the GPU's 16-bit gate/up above 8 rows included), so one rank
  // gives the plain model's numbers.
  ops::swiglu_mlp(a.x, norm, mlp, a.out);
  collective->all_reduce_sum(a.out);
  ops::add(a.x, a.out, a.x);
}

}  // namespace brioche::model
