// A loaded Llama-family model and its batched forward pass.
//
//   auto model = Model::load("SmolLM2-135M-Instruct.Q4_1.gguf");
//   KvCache cache(model->config(), {.block_size = 16, .n_blocks = 256});
//   ForwardBatch batch = ...;             // rows of several sequences
//   Tensor logits;                        // resized by forward
//   model->forward(batch, cache, logits); // [batch.n_logit_rows(), vocab]
//
// Weights are used in their stored dtype (zero-copy from the GGUF mmap or the
// safetensors files); small vectors (norms, biases) are converted to f32.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "core/tensor.h"
#include "model/forward_batch.h"
#include "model/kv_cache.h"
#include "model/model_config.h"

namespace brioche::formats {
class GgufFile;
}

namespace brioche::model {

struct Checkpoint;
struct Gemma4Checkpoint;
struct Qwen35Checkpoint;

struct LoadOptions {
  int max_context = 0;  // override of the trained context length; 0 keeps it
  // Convert every weight matrix to this dtype at load (e.g. F32 to run a
  // quantized file at full precision, for accuracy checks); F32/F16/BF16 or
  // a quantized dtype. Unset keeps the stored dtypes (zero-copy).
  std::optional<DType> convert_weights;
  // Where weights and activations live. Device::CUDA uploads every weight
  // at load; the KV cache passed to forward must be on the same device
  // (KvCacheOptions::device) and logits land where the caller's tensor is
  // (a CUDA logits tensor stays on the device).
  Device device = Device::CPU;
  // Runs on the loaded checkpoint before conversion and upload: how layers
  // above the model change its weights (e.g. merging a LoRA adapter, which
  // the train layer knows how to read).
  std::function<void(Checkpoint&)> adjust_checkpoint;
  // The same for a Gemma 4 checkpoint (its own weights type, model/gemma4_weights.h).
  std::function<void(Gemma4Checkpoint&)> adjust_gemma4_checkpoint;
  // The same for a Qwen 3.5 checkpoint (model/qwen35_weights.h).
  std::function<void(Qwen35Checkpoint&)> adjust_qwen35_checkpoint;
  // Tensor parallelism: keep only rank tp_rank's shard of tp_size
  // (model/tensor_parallel.h), sliced after adjust/convert, before upload.
  int tp_rank = 0;
  int tp_size = 1;
};

class Model {
 public:
  virtual ~Model() = default;

  // `path` is a .gguf file or a Hugging Face safetensors directory.
  // Unknown architectures and missing tensors are brioche::Error naming the
  // architecture/tensor and the file.
  static std::unique_ptr<Model> load(const std::string& path, LoadOptions options = {});
  // Whether this build has CUDA kernels for the architecture at `path`
  // (every architecture it loads does now: Llama family, Gemma 4, Qwen 3.5):
  // `--device auto` picks the CPU for any that lacks them rather than refuse it.
  static bool has_cuda_kernels(const std::string& path);

  virtual const ModelConfig& config() const = 0;
  // The GGUF file (tokenizer, chat template metadata); nullptr for safetensors.
  virtual const formats::GgufFile* gguf() const = 0;
  // Directory of a safetensors checkpoint (tokenizer.json lives there); "" for GGUF.
  virtual std::string directory() const = 0;
  // GGUF tokenizer.chat_template or tokenizer_config.json's, "" if none.
  virtual std::string chat_template() const = 0;

  // Runs all rows of `batch`, appending their K/V to `cache` through the
  // block tables, and writes logits for the rows with wants_logits, in row
  // order: logits becomes f32 [batch.n_logit_rows(), vocab_size].
  virtual void forward(const ForwardBatch& batch, KvCache& cache, Tensor& logits) = 0;

  // forward() of a decode step whose tokens are already on the device:
  // `tokens` (i32 [batch.n_rows()] on the model's device) replaces
  // batch.tokens, which only needs to hold valid ids. The engine queues step
  // t + 1 this way, fed by step t's sampler, before step t's tokens reach the
  // host. False, with nothing queued, when the model cannot take such a
  // batch (it must be a decode step whose CUDA graph is already recorded).
  virtual bool forward_from_device_tokens(const ForwardBatch& batch, const Tensor& tokens, KvCache& cache,
                                          Tensor& logits) {
    (void)batch, (void)tokens, (void)cache, (void)logits;
    return false;
  }

  // Where the weights live (LoadOptions::device).
  virtual Device device() const { return Device::CPU; }
  // False when part of the KV state lives outside the cache passed to
  // forward (tensor parallelism: the other ranks hold their own KV heads),
  // so the caller must not edit that cache directly (e.g. copy K/V between
  // blocks for prefix sharing): only forward keeps every rank in step.
  virtual bool kv_cache_is_whole() const { return true; }

  // Bytes of weights (as stored).
  virtual size_t weight_bytes() const = 0;
};

}  // namespace brioche::model
