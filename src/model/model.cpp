#include "model/model.h"

#include <filesystem>

#include "core/error.h"
#include "model/llama.h"
#include "model/weights.h"

namespace brioche::model {

std::unique_ptr<Model> Model::load(const std::string& path, LoadOptions options) {
  namespace fs = std::filesystem;
  if (!fs::exists(path)) fail(path, ": expected a .gguf file or a safetensors model directory, found nothing");
  Checkpoint ck = fs::is_directory(path) ? load_safetensors_checkpoint(path) : load_gguf_checkpoint(path);
  if (options.max_context > 0) ck.config.max_context = options.max_context;
  const ModelConfig& c = ck.config;
  BRIOCHE_CHECK(c.n_heads > 0 && c.n_kv_heads > 0 && c.n_heads % c.n_kv_heads == 0, path,
                ": attention heads ", c.n_heads, " must be a multiple of kv heads ", c.n_kv_heads);
  BRIOCHE_CHECK(c.head_dim > 0 && c.head_dim % 2 == 0, path, ": head_dim must be even, found ", c.head_dim);
  return std::make_unique<LlamaModel>(std::move(ck));
}

}  // namespace brioche::model
