#include "train/train_base.h"

#include "core/error.h"
#include "model/gemma4.h"
#include "model/qwen35.h"
#include "train/gemma4_train_model.h"
#include "train/qwen35_train_model.h"

namespace brioche::train {

LoraShapes lora_shapes_of(const model::Model& model) {
  if (const auto* g = dynamic_cast<const model::Gemma4Model*>(&model)) return gemma4_lora_shapes(g->gemma4_config());
  if (const auto* q = dynamic_cast<const model::Qwen35Model*>(&model))
    return qwen35_lora_shapes(q->config(), q->qwen35_config());
  return {};
}

TrainBase llama_train_base(const model::Checkpoint& ck) {
  return {.config = &ck.config,
          .output = &ck.weights.output,
          .device = ck.weights.output_norm.device(),
          .make_stack = [&ck](LoraAdapter* adapter, const TrainModelOptions& options) -> std::unique_ptr<TrainStack> {
            return std::make_unique<TrainModel>(ck, adapter, options);
          },
          .load_adapter = [&ck](const std::string& dir) { return load_adapter(dir, ck); },
          .save_adapter = [&ck](const std::string& dir, LoraAdapter& adapter,
                                const AdapterWriteInfo& info) { save_adapter(dir, adapter, ck, info); },
          .huggingface_repo_id = huggingface_repo_id(ck)};
}

TrainBase gemma4_train_base(const model::Gemma4Checkpoint& ck) {
  const LoraShapes shapes = gemma4_lora_shapes(ck.config);
  return {.config = &ck.config.base,
          .output = &ck.weights.output,
          .logit_softcap = ck.config.final_logit_softcap,
          .shapes = shapes,
          .device = ck.weights.output_norm.device(),
          .make_stack = [&ck](LoraAdapter* adapter, const TrainModelOptions& o) -> std::unique_ptr<TrainStack> {
            // The Gemma 4 stack runs on the CPU with the segmented backward; offloads and MLP chunks are not there yet.
            BRIOCHE_CHECK(!o.offload_boundaries && !o.offload_attention && o.mlp_chunk_rows == 0,
                          "train: Gemma 4 trains without offload_boundaries, offload_attention and mlp_chunk_size in "
                          "this build (found mlp_chunk_size ",
                          o.mlp_chunk_rows, ")");
            return std::make_unique<Gemma4TrainModel>(ck, adapter, o.segment_size);
          },
          .load_adapter =
              [&ck, shapes](const std::string& dir) {
                return load_adapter(dir, ck.config.base, /*permuted_qk=*/false, 1 << 16, shapes);
              },
          .save_adapter =
              [&ck](const std::string& dir, LoraAdapter& adapter, const AdapterWriteInfo& info) {
                AdapterWriteInfo named = info;
                named.language_model = ck.config.multimodal;  // peft's layer names for the multimodal class
                save_adapter(dir, adapter, ck.config.base, false, named);
              },
          .huggingface_repo_id = huggingface_repo_id(ck.directory)};
}

TrainBase qwen35_train_base(const model::Qwen35Checkpoint& ck) {
  const LoraShapes shapes = qwen35_lora_shapes(ck);
  return {.config = &ck.config,
          .output = &ck.output,
          .shapes = shapes,
          .device = ck.output_norm.device(),
          .make_stack = [&ck](LoraAdapter* adapter, const TrainModelOptions& o) -> std::unique_ptr<TrainStack> {
            // The Qwen 3.5 stack keeps every layer's activations on the CPU: the memory levers are not there yet.
            BRIOCHE_CHECK(o.segment_size == 0 && !o.offload_boundaries && !o.offload_attention && o.mlp_chunk_rows == 0,
                          "train: Qwen 3.5 trains without segment_size, offload_boundaries, offload_attention and "
                          "mlp_chunk_size in this build (found segment_size ",
                          o.segment_size, ", mlp_chunk_size ", o.mlp_chunk_rows, ")");
            return std::make_unique<Qwen35TrainModel>(ck, adapter);
          },
          .load_adapter =
              [&ck, shapes](const std::string& dir) { return load_adapter(dir, ck.config, false, 1 << 16, shapes); },
          .save_adapter =
              [&ck](const std::string& dir, LoraAdapter& adapter, const AdapterWriteInfo& info) {
                AdapterWriteInfo named = info;
                named.language_model = ck.multimodal;  // peft's layer names for Qwen3_5ForConditionalGeneration
                save_adapter(dir, adapter, ck.config, false, named);
              },
          .huggingface_repo_id = huggingface_repo_id(ck.directory)};
}

}  // namespace brioche::train
