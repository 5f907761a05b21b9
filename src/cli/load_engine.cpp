#include "cli/load_engine.h"

#include "core/error.h"

namespace brioche::cli {

std::unique_ptr<engine::Engine> load_engine(const ModelFlags& flags, engine::EngineOptions options) {
  flags.apply();
  options.model_path = resolve_model_path(flags.model);
  options.device = flags.resolved_device();
  try {
    return engine::Engine::load(options);
  } catch (const Error& e) {
    throw UsageError{std::string(e.what()) + " (brioche runs llama, mistral, qwen2 and qwen3 models as GGUF or safetensors)"};
  }
}

}  // namespace brioche::cli
