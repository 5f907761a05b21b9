#include "cli/load_engine.h"

#include "cli/tensor_parallel.h"
#include "core/error.h"
#include "model/weights.h"
#include "train/adapter_io.h"
#include "train/gemma4_train_model.h"
#include "train/qwen35_train_model.h"

namespace brioche::cli {

std::shared_ptr<model::Model> load_model(const ModelFlags& flags, int max_context) {
  flags.apply();
  const std::string path = resolve_model_path(flags.model);
  model::LoadOptions options{.max_context = max_context, .device = flags.resolved_device()};
  if (flags.weights_dtype == "f32") options.convert_weights = DType::F32;
  if (flags.weights_dtype == "f16") options.convert_weights = DType::F16;
  if (flags.weights_dtype == "bf16") options.convert_weights = DType::BF16;
  if (!flags.adapter.empty()) {
    options.adjust_checkpoint = [&flags](model::Checkpoint& checkpoint) {
      train::merge_adapter(checkpoint, *train::load_adapter(flags.adapter, checkpoint));
    };
    options.adjust_gemma4_checkpoint = [&flags](model::Gemma4Checkpoint& checkpoint) {
      train::merge_adapter(checkpoint, *train::load_adapter(flags.adapter, checkpoint.config.base, false, 1 << 16,
                                                            train::gemma4_lora_shapes(checkpoint.config)));
    };
    options.adjust_qwen35_checkpoint = [&flags](model::Qwen35Checkpoint& checkpoint) {
      train::merge_adapter(checkpoint, *train::load_adapter(flags.adapter, checkpoint.config, false, 1 << 16,
                                                            train::qwen35_lora_shapes(checkpoint)));
    };
  }
  try {
    if (flags.tensor_parallel > 1 || flags.tp_rank >= 0) return load_tensor_parallel(flags, path, std::move(options));
    return model::Model::load(path, std::move(options));
  } catch (const Error& e) {
    throw UsageError{e.what()};
  }
}

std::unique_ptr<engine::Engine> load_engine(const ModelFlags& flags, engine::EngineOptions options) {
  std::shared_ptr<model::Model> model = load_model(flags, options.kv.max_context);
  try {
    return engine::Engine::from_model(std::move(model), options);
  } catch (const Error& e) {
    throw UsageError{e.what()};
  }
}

}  // namespace brioche::cli
