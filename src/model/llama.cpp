// The Llama architecture family: Llama 2/3.x, Mistral, Qwen2/2.5, Qwen3,
// SmolLM2. One pre-norm decoder, differing only in flags of ModelConfig:
//
//   x = embed(tokens)
//   for each layer:
//     x = x + attention(rms_norm(x))      (qkv bias, q/k norm, RoPE variant)
//     x = x + swiglu_mlp(rms_norm(x))
//   logits = lm_head(rms_norm(x))         (lm_head = embed when tied)
#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "core/error.h"
#include "formats/gguf.h"
#include "model/blocks.h"
#include "model/llama.h"
#include "ops/device.h"
#include "ops/embedding.h"
#include "ops/fused_matmul.h"

namespace brioche::model {

LlamaModel::LlamaModel(Checkpoint checkpoint)
    : ck_(std::move(checkpoint)),
      inv_freq_(ops::rope_inv_freq(ck_.config.head_dim, ck_.config.rope.theta, ck_.config.rope.scaling,
                                   ck_.config.rope.freq_factors)) {}

void LlamaModel::set_collective(ops::Collective* collective) {
  if (collective == collective_) return;
  graphs_.clear();
  collective_ = collective;
}

const formats::GgufFile* LlamaModel::gguf() const { return ck_.gguf.get(); }

size_t LlamaModel::weight_bytes() const {
  const ModelWeights& w = ck_.weights;
  size_t n = w.token_embd.nbytes() + w.output_norm.nbytes();
  if (!ck_.config.tied_embeddings) n += w.output.nbytes();
  for (const LayerWeights& l : w.layers) {
    for (const Tensor* t : {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.wo, &l.bq, &l.bk, &l.bv, &l.bo, &l.q_norm, &l.k_norm,
                            &l.ffn_norm, &l.w_gate, &l.w_up, &l.w_down})
      n += t->nbytes();
  }
  return n;
}

void LlamaModel::check_batch(const ForwardBatch& batch, const KvCache& cache) const {
  const ModelConfig& c = ck_.config;
  check_batch_rows(batch, c.vocab_size);
  BRIOCHE_CHECK(cache.n_layers() == 0 || cache.keys(0).device() == device(), "forward: the KV cache is on ",
                device_name(cache.keys(0).device()), " but the model is on ", device_name(device()),
                " (set KvCacheOptions::device to Model::device())");
  BRIOCHE_CHECK(
      cache.n_layers() == c.n_layers && cache.keys(0).dim(2) == c.n_kv_heads && cache.keys(0).dim(3) == c.head_dim,
      "forward: KV cache of ", cache.n_layers(), " layers x ", cache.keys(0).describe(), " does not fit the model (",
      c.n_layers, " layers, ", c.n_kv_heads, " kv heads of ", c.head_dim, ")");
}

void LlamaModel::shape_logits(int64_t n_logits, Tensor& logits) const {
  const ModelConfig& c = ck_.config;
  // Logits stay where the caller's tensor lives (host by default).
  const Device logits_device = logits.defined() ? logits.device() : Device::CPU;
  if (!logits.defined() || logits.rank() != 2 || logits.dim(0) != n_logits || logits.dim(1) != c.vocab_size ||
      logits.dtype() != DType::F32) {
    logits = ops::zeros(DType::F32, {std::max<int64_t>(n_logits, 1), c.vocab_size}, logits_device);
    if (n_logits == 0) logits = logits.slice(0, 0, 0);
  }
}

void LlamaModel::forward(const ForwardBatch& batch, KvCache& cache, Tensor& logits) {
  const ModelConfig& c = ck_.config;
  check_batch(batch, cache);
  const int64_t n = batch.n_rows();
  const int64_t n_logits = batch.n_logit_rows();
  shape_logits(n_logits, logits);
  if (n == 0) return;
  if (graphs_.run(batch, cache, logits,
                  [&](const ForwardBatch& b, Activations& a, Tensor& out, const AdapterTable* adapters) {
                    forward_on_device(b, cache, a, out, adapters);
                  }))
    return;
  Activations a = buffers_.view(c, n, device());
  if (n_logits == 0 || logits.device() == device()) {
    forward_on_device(batch, cache, a, logits);
    return;
  }
  // Model on the device, logits wanted on the host: one copy back.
  if (!device_logits_.defined() || device_logits_.dim(0) < n_logits)
    device_logits_ = ops::zeros(DType::F32, {n_logits, c.vocab_size}, device());
  Tensor dl = device_logits_.slice(0, 0, n_logits);
  forward_on_device(batch, cache, a, dl);
  ops::copy(dl, logits);
}

bool LlamaModel::forward_from_device_tokens(const ForwardBatch& batch, const Tensor& tokens, KvCache& cache,
                                            Tensor& logits) {
  BRIOCHE_CHECK(tokens.device() == device() && tokens.dtype() == DType::I32 && tokens.rank() == 1 &&
                    tokens.dim(0) == batch.n_rows(),
                "forward_from_device_tokens: expected i32 [", batch.n_rows(), "] on ", device_name(device()), ", got ",
                tokens.describe());
  check_batch(batch, cache);
  if (batch.n_rows() == 0) return false;
  shape_logits(batch.n_logit_rows(), logits);
  return graphs_.run(
      batch, cache, logits,
      [&](const ForwardBatch& b, Activations& a, Tensor& out, const AdapterTable* adapters) {
        forward_on_device(b, cache, a, out, adapters);
      },
      &tokens);
}

std::vector<AdapterRows> LlamaModel::adapter_segments(const ForwardBatch& batch) const {
  std::vector<AdapterRows> rows;
  for (const SequenceView& s : batch.sequences) {
    if (s.adapter == nullptr || s.n_rows == 0) continue;
    BRIOCHE_CHECK(int(s.adapter->layers.size()) == ck_.config.n_layers, "forward: adapter '", s.adapter->name, "' has ",
                  s.adapter->layers.size(), " layers, the model ", ck_.config.n_layers);
    // Consecutive sequences of one adapter make one segment (the scheduler
    // orders a step's rows by adapter).
    if (!rows.empty() && rows.back().adapter == s.adapter && rows.back().first_row + rows.back().n_rows == s.first_row)
      rows.back().n_rows += s.n_rows;
    else
      rows.push_back({.first_row = s.first_row, .n_rows = s.n_rows, .adapter = s.adapter});
  }
  std::sort(rows.begin(), rows.end(),
            [](const AdapterRows& x, const AdapterRows& y) { return x.first_row < y.first_row; });
  return rows;
}

Tensor& LlamaModel::lora_scratch(const ForwardBatch& batch, int64_t n_rows) {
  int64_t rank = 1;
  for (const SequenceView& s : batch.sequences)
    if (s.adapter != nullptr) rank = std::max<int64_t>(rank, s.adapter->rank);
  if (!lora_u_.defined() || lora_u_.dim(0) < n_rows || lora_u_.dim(1) < rank || lora_u_.device() != device())
    lora_u_ = ops::zeros(DType::F32,
                         {std::max<int64_t>(n_rows, lora_u_.defined() ? lora_u_.dim(0) : 0),
                          std::max<int64_t>(rank, lora_u_.defined() ? lora_u_.dim(1) : 0)},
                         device());
  return lora_u_;
}

AdapterTable LlamaModel::upload_adapter_table(const ForwardBatch& batch) {
  const int32_t rows = batch.n_rows(), n_layers = ck_.config.n_layers;
  const int32_t rank_cap = adapter_rank_cap(batch);
  const int32_t slots = int32_t(batch.sequences.size());  // (a prefill's few sequences: a small table)
  const size_t words = adapter_table_words(rows, slots, n_layers);
  fill_adapter_table(batch, rows, slots, n_layers, lora_staging_.fill(words));
  if (!lora_table_.defined() || size_t(lora_table_.dim(0)) < words)
    lora_table_ = ops::zeros(DType::I32, {int64_t(words)}, device());
  Tensor block = lora_table_.slice(0, 0, int64_t(words));
  lora_staging_.upload(block);
  if (!lora_table_u_.defined() || lora_table_u_.dim(0) < rows || lora_table_u_.dim(1) < 3 * rank_cap)
    lora_table_u_ = ops::zeros(DType::F32,
                               {std::max<int64_t>(rows, lora_table_u_.defined() ? lora_table_u_.dim(0) : 0),
                                std::max<int64_t>(3 * rank_cap, lora_table_u_.defined() ? lora_table_u_.dim(1) : 0)},
                               device());
  return adapter_table_views(block, rows, slots, n_layers, rank_cap, lora_table_u_.slice(0, 0, rows));
}

void LlamaModel::forward_on_device(const ForwardBatch& batch, KvCache& cache, Activations& a, Tensor& logits,
                                   const AdapterTable* adapters) {
  const ModelConfig& c = ck_.config;
  const ModelWeights& w = ck_.weights;
  const int64_t n = batch.n_rows();
  const int64_t n_logits = batch.n_logit_rows();
  std::vector<ops::AttentionSequence> sequences;
  sequences.reserve(batch.sequences.size());
  for (const SequenceView& s : batch.sequences) sequences.push_back({s.first_row, s.n_rows, s.n_past, s.block_table});
  // Each block's last matmul adds to a.x, and the next block's first
  // normalizes it: on the GPU's decode path the first writes that norm and
  // hands it on here (ops/norm_handoff.h).
  ops::NormHandoff norm_handoff;
  BlockContext ctx{.config = c,
                   .positions = batch.positions,
                   .sequences = sequences,
                   .inv_freq = inv_freq_,
                   .collective = collective_,
                   .norm_handoff = &norm_handoff};

  // Adapter rows: on CUDA through the batch's adapter table on the device
  // (a decode graph's, else uploaded now), on the CPU per run of rows.
  const std::vector<AdapterRows> adapter_rows = adapter_segments(batch);
  AdapterTable uploaded;
  LayerLora lora;
  if (adapters != nullptr) {
    lora.table = adapters;
  } else if (!adapter_rows.empty() && device() == Device::CUDA) {
    uploaded = upload_adapter_table(batch);
    lora.table = &uploaded;
  } else if (!adapter_rows.empty()) {
    lora.rows = adapter_rows;
    lora.u_scratch = &lora_scratch(batch, n);
  }
  const bool adapted = lora.adapted();

  ops::embedding(w.token_embd, batch.tokens, a.x);
  // The lm_head normalizes a.x itself only when every row wants logits
  // (below: otherwise it reads gathered rows, or does not run); then no
  // norm of a.x follows the last block. Adapted blocks norm explicitly.
  const Tensor no_norm;
  const Tensor& head_norm = n_logits == n ? w.output_norm : no_norm;
  for (int layer = 0; layer < c.n_layers; ++layer) {
    const LayerWeights& lw = w.layers[layer];
    lora.layer = layer;
    norm_handoff.request(a.x, !adapted ? lw.ffn_norm : no_norm);
    attention_block(ctx, lw, {.k = cache.keys(layer), .v = cache.values(layer)}, a, lora);
    norm_handoff.request(a.x, adapted ? no_norm : layer + 1 < c.n_layers ? w.layers[layer + 1].attn_norm : head_norm);
    mlp_block(ctx, lw, a, lora);
  }
  if (n_logits == 0) return;

  // Only rows that need logits go through the final norm and the lm_head:
  // all of them when decoding, read from a.x directly; otherwise gathered
  // into a.h's first n_logits rows (a.h is free now), runs of consecutive
  // rows in one copy.
  Tensor last = a.h.slice(0, 0, n_logits);  // [n_logits, hidden]
  Tensor rows = a.x;
  if (n_logits != n) {
    int64_t j = 0;
    for (int64_t r = 0; r < n;) {
      if (!batch.wants_logits[r]) {
        ++r;
        continue;
      }
      int64_t end = r;
      while (end < n && batch.wants_logits[end]) ++end;
      Tensor to = last.slice(0, j, j + (end - r));
      ops::copy(a.x.slice(0, r, end), to);
      j += end - r;
      r = end;
    }
    rows = last;
  }
  const Tensor* head[] = {&w.output};
  Tensor* out[] = {&logits};
  ops::matmul_group(rows, {.weight = w.output_norm, .eps = c.rms_eps, .normed = last, .handoff = &norm_handoff}, head,
                    out);
}

}  // namespace brioche::model
