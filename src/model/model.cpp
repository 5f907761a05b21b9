#include "model/model.h"

#include <filesystem>

#include "core/error.h"
#include "model/llama.h"
#include "model/weights.h"
#include "model/device_weights.h"
#include "model/tensor_parallel.h"
#include "ops/quantize.h"

namespace brioche::model {

namespace {

void convert_weights(Checkpoint& ck, DType dtype) {
  ModelWeights& w = ck.weights;
  auto convert = [dtype](Tensor& t) {
    if (t.defined() && t.dtype() != dtype) t = ops::convert(t, dtype);
  };
  convert(w.token_embd);
  if (ck.config.tied_embeddings) w.output = w.token_embd;
  else convert(w.output);
  for (LayerWeights& l : w.layers)
    for (Tensor* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) convert(*t);
  ck.config.weight_dtype = dtype;
}

}  // namespace

std::unique_ptr<Model> Model::load(const std::string& path, LoadOptions options) {
  namespace fs = std::filesystem;
  if (!fs::exists(path)) fail(path, ": expected a .gguf file or a safetensors model directory, found nothing");
  Checkpoint ck = fs::is_directory(path) ? load_safetensors_checkpoint(path) : load_gguf_checkpoint(path);
  if (options.max_context > 0) ck.config.max_context = options.max_context;
  if (options.adjust_checkpoint) options.adjust_checkpoint(ck);
  // The loaders validated the file's config (model_config.h); this covers a
  // --max-context override and whatever adjust_checkpoint changed, before
  // anything sizes a buffer from it.
  validate_model_config(ck.config, ConfigKeyNames::fields(), path);
  if (options.convert_weights) convert_weights(ck, *options.convert_weights);
  if (options.tp_size > 1) ck = shard_checkpoint(ck, {.rank = options.tp_rank, .size = options.tp_size});
  if (options.device != Device::CPU) move_weights(ck, options.device);
  return std::make_unique<LlamaModel>(std::move(ck));
}

}  // namespace brioche::model
