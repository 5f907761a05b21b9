// Tensor parallelism for the Llama family: one process (rank) per GPU, each
// holding a shard of every layer, joined by NCCL all-reduces.
//
// Sharding (Megatron-style, rank r of N):
//   q/k/v   rows of heads [r·H/N, (r+1)·H/N) (KV heads likewise), their biases
//   o_proj  the columns of those heads        -> partial sum over ranks
//   gate/up rows of intermediate slice r
//   down    columns of intermediate slice r   -> partial sum over ranks
//   norms, embedding, lm_head: replicated (logits come from rank 0)
// Each attention and MLP block all-reduces its partial output once
// (blocks.h). A rank's KV cache holds its own KV heads only.
//
// Driving the ranks: rank 0 owns the engine and a TensorParallelModel, which
// broadcasts each ForwardBatch to the other ranks before running its own
// shard; the other ranks sit in run_tensor_parallel_worker, running the same
// batches on their shards with a KV cache of the same geometry.
#pragma once

#include <memory>
#include <string>

#include "model/llama.h"
#include "model/model.h"
#include "model/weights.h"
#include "ops/collective.h"

namespace brioche::model {

struct ShardSpec {
  int rank = 0;
  int size = 1;
};

// The config of one shard: n_heads, n_kv_heads and intermediate_size divided
// by the rank count. An error names the size that does not divide.
ModelConfig shard_config(const ModelConfig& full, ShardSpec shard);

// Rows [begin, end) of a matrix [rows, cols], as a new contiguous CPU tensor.
Tensor copy_rows(const Tensor& w, int64_t begin, int64_t end);
// Columns [begin, end) of a matrix [rows, cols], as a new contiguous CPU
// tensor. For block-quantized dtypes both ends must fall on block borders
// (an error names `what`, the block size and the offending column).
Tensor copy_columns(const Tensor& w, int64_t begin, int64_t end, const std::string& what);

// Rank `shard.rank`'s part of a checkpoint whose weights are on the CPU
// (sliced tensors are copies; replicated ones share storage with `full`).
// Move it to its GPU afterwards (device_weights.h).
Checkpoint shard_checkpoint(const Checkpoint& full, ShardSpec shard);

// Rank 0's model: config() is rank 0's shard config (the engine sizes the KV
// cache per rank); forward broadcasts the batch (and the cache geometry) to
// the other ranks, then runs the shard. Logits come from the replicated
// lm_head. The destructor tells the workers to stop.
class TensorParallelModel final : public Model {
 public:
  // `shard` is rank 0's shard model; the collective has rank 0.
  TensorParallelModel(std::unique_ptr<LlamaModel> shard, std::unique_ptr<ops::Collective> collective);
  ~TensorParallelModel() override;

  const ModelConfig& config() const override { return shard_->config(); }
  const formats::GgufFile* gguf() const override { return shard_->gguf(); }
  std::string directory() const override { return shard_->directory(); }
  std::string chat_template() const override { return shard_->chat_template(); }
  void forward(const ForwardBatch& batch, KvCache& cache, Tensor& logits) override;
  size_t weight_bytes() const override { return shard_->weight_bytes(); }
  Device device() const override { return shard_->device(); }
  bool kv_cache_is_whole() const override { return false; }  // workers hold the other KV heads
  int n_ranks() const { return collective_->size(); }
  const LlamaModel& shard() const { return *shard_; }

 private:
  std::unique_ptr<ops::Collective> collective_;
  std::unique_ptr<LlamaModel> shard_;
  std::vector<int32_t> message_;
};

// Ranks 1..N−1: receive batches from rank 0 and run them on `shard` with a
// KV cache of their own (KvCacheOptions as on rank 0, on the shard's device),
// until rank 0's TensorParallelModel is destroyed. Returns the number of
// forwards run. On return (or an error) the shard's collective is unset and
// its decode graphs dropped, so the collective may then be destroyed.
int64_t run_tensor_parallel_worker(LlamaModel& shard, ops::Collective& collective);

// The wire format of one batch (exposed for tests): a fixed header, then a
// payload of header[kPayloadWords] int32 words.
namespace tp_wire {
enum Field { kKind, kRows, kSequences, kPayloadWords, kBlocks, kBlockSize, kCacheDType, kHeaderWords };
enum Kind { kForward = 1, kStop = 2 };
void encode(const ForwardBatch& batch, const KvCache& cache, std::vector<int32_t>& header,
            std::vector<int32_t>& payload);
// Rebuilds the batch; its block tables point into `payload`.
ForwardBatch decode(const std::vector<int32_t>& header, const std::vector<int32_t>& payload);
}  // namespace tp_wire

}  // namespace brioche::model
