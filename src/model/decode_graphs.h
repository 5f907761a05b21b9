// Decode steps as CUDA graphs.
//
// A batch in which every sequence brings one token and wants its logits (a
// decode step) runs as a recorded graph of the whole forward: a few hundred
// kernels for one launch of host time. Its rows are padded up to a bucket
// size (exact up to 8, then 12, 16, 24, ... 256) and its block tables to a
// power-of-two width; a bucket's graph, activations, inputs and logits live
// at fixed device addresses. The first step of a bucket runs eagerly with
// the same device inputs (it warms up cuBLASLt and checks every launch) and
// records the graph; later steps upload the inputs in one copy, replay, and
// copy the logits out.
//
// Verify steps of speculative decoding are graphs too: each sequence brings
// its last token and its drafts (at most kMaxRowsPerSequence rows), every
// row wants logits. Row r of such a step is recorded as a decode row at its
// own position with a copy of its sequence's block table; the attention then
// stores every row's K/V before any row attends (ops::DecodeInputs::
// rows_share_sequences), so a draft row reads the keys of the rows before
// it. Buckets are keyed by that as well: a decode step's graph fuses the
// store into the attention, which a verify step's must not.
//
// Steps with adapter rows are graphs too: the batch's adapter table (which
// adapter each row runs with, and every adapter's factors: model/
// adapter_table.h) is uploaded with the inputs and read by the graph's LoRA
// launches, so any mix of adapters replays one graph; buckets are keyed by
// the adapters' rank cap as well (0 for the base alone).
//
// A cache with a window pool (KvCache::n_window_blocks, Gemma 4's sliding
// layers) adds each row's window-pool table to the inputs, at the same
// width; the forward reads it under ops::ScopedWindowTables.
//
// Graphs hold the KV cache's addresses: a different cache drops them all.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <span>
#include <tuple>
#include <utility>
#include <vector>

#include "model/adapter_table.h"
#include "model/blocks.h"
#include "model/forward_batch.h"
#include "model/kv_cache.h"
#include "ops/device.h"
#include "ops/device_graph.h"

namespace brioche::model {

class DecodeGraphs {
 public:
  // The forward of a decode batch into `a` and device logits [n_rows, vocab],
  // with the batch's adapter table (null when it has no adapter rows).
  using Forward =
      std::function<void(const ForwardBatch& batch, Activations& a, Tensor& logits, const AdapterTable* adapters)>;

  // `block_activations`: each bucket owns the Activations of the Llama
  // blocks (blocks.h) that the forward writes; false for a model that keeps
  // its own scratch per bucket (Gemma 4), which then gets an empty one.
  explicit DecodeGraphs(const ModelConfig& config, bool block_activations = true)
      : config_(config), block_activations_(block_activations) {}

  // Runs `batch` through its bucket's graph and writes its logits (host or
  // device tensor [n_rows, vocab]). False, with nothing done, when the batch
  // is not a step the graphs take (is_graph_step; or graphs are disabled). With
  // `device_tokens` (i32 [n_rows] on the device, read in stream order) the
  // rows' tokens come from there, and only a bucket whose graph is recorded
  // takes the batch.
  bool run(const ForwardBatch& batch, const KvCache& cache, Tensor& logits, const Forward& forward,
           const Tensor* device_tokens = nullptr);

  // Buckets recorded so far (for tests and logs).
  size_t n_graphs() const;
  // Destroys every graph. A graph that recorded NCCL calls holds a reference
  // on the communicator (ncclCommDestroy waits until such graphs are gone),
  // so graphs must be dropped before the communicator is destroyed.
  void clear();

 private:
  struct Bucket {
    ActivationBuffers buffers;
    Tensor input_block;        // i32 [rows · (2 + width · tables)]: tokens | positions | tables | window tables
    ops::DecodeInputs inputs;  // views of input_block
    Tensor logits;             // [rows, vocab] on the device
    ops::DecodeGraph graph;
    Tensor adapter_block;   // i32 words: the step's adapter table (rank cap > 0)
    AdapterTable adapters;  // views of adapter_block, and the LoRA scratch
  };

  // Rows one sequence may bring to a recorded step (its token and up to 15
  // drafts): longer runs are prefill chunks, which the prefill kernels take.
  static constexpr int kMaxRowsPerSequence = 16;

  // A step the graphs take: sequences of 1..kMaxRowsPerSequence rows in
  // batch order, every row wanting logits.
  static bool is_graph_step(const ForwardBatch& batch);
  // The padded batch of a step's inputs (tokens | positions | tables |
  // window tables when `windowed`) that a bucket's forward runs on.
  static ForwardBatch padded(std::span<const int32_t> inputs, int rows, int width, bool windowed);

  const ModelConfig& config_;
  const bool block_activations_;
  // By (rows, table width, adapter rank cap, rows share sequences).
  std::map<std::tuple<int, int, int, bool>, Bucket> buckets_;
  std::vector<const void*> cache_addresses_;  // the cache the graphs write
  ops::StagedUpload staging_;                 // a step's input_block, on the host
  ops::StagedUpload adapter_staging_;         // a step's adapter table, on the host
};

}  // namespace brioche::model
