#include "model/model.h"

#include <filesystem>

#include "core/error.h"
#include "model/gemma4.h"
#include "model/llama.h"
#include "model/load_gemma4_gguf.h"
#include "model/load_qwen35_gguf.h"
#include "model/qwen35.h"
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
  if (ck.config.tied_embeddings)
    w.output = w.token_embd;
  else
    convert(w.output);
  for (LayerWeights& l : w.layers)
    for (Tensor* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) convert(*t);
  ck.config.weight_dtype = dtype;
}

// What the forward needs of the weights beyond their shapes (checked by the
// loaders): the fused SwiGLU matmul (ops/fused_matmul.cpp) reads gate and up
// as one weight type. A file that mixes them would load and then fail every
// request; refused here, after --convert-weights had its chance to unify them.
void check_forward_preconditions(const Checkpoint& ck, const std::string& path) {
  for (size_t l = 0; l < ck.weights.layers.size(); ++l) {
    const LayerWeights& w = ck.weights.layers[l];
    if (w.w_gate.dtype() != w.w_up.dtype()) {
      fail(path, ": layer ", l, " up projection: expected the gate projection's type ", dtype_name(w.w_gate.dtype()),
           " (the fused SwiGLU matmul reads both as one), found ", dtype_name(w.w_up.dtype()));
    }
  }
}

}  // namespace

std::unique_ptr<Model> Model::load(const std::string& path, LoadOptions options) {
  namespace fs = std::filesystem;
  if (!fs::exists(path)) fail(path, ": expected a .gguf file or a safetensors model directory, found nothing");
  // Gemma 4 has its own layer structure, weights and loader (model/gemma4.h).
  if (fs::is_directory(path) && is_gemma4_directory(path)) return load_gemma4_model(path, options);
  // Qwen 3.5 likewise: hybrid linear/full attention layers (model/qwen35.h).
  if (fs::is_directory(path) && is_qwen35_directory(path)) return load_qwen35_model(path, options);
  if (!fs::is_directory(path) && is_qwen35_gguf(path)) return load_qwen35_model(path, options);
  if (!fs::is_directory(path) && is_gemma4_gguf(path)) return load_gemma4_model(path, options);
  Checkpoint ck = fs::is_directory(path) ? load_safetensors_checkpoint(path) : load_gguf_checkpoint(path);
  if (options.max_context > 0) ck.config.max_context = options.max_context;
  if (options.adjust_checkpoint) options.adjust_checkpoint(ck);
  // The loaders validated the file's config (model_config.h); this covers a
  // --max-context override and whatever adjust_checkpoint changed, before
  // anything sizes a buffer from it.
  validate_model_config(ck.config, ConfigKeyNames::fields(), path);
  if (options.convert_weights) convert_weights(ck, *options.convert_weights);
  check_forward_preconditions(ck, path);
  if (options.tp_size > 1) ck = shard_checkpoint(ck, {.rank = options.tp_rank, .size = options.tp_size});
  if (options.device != Device::CPU) move_weights(ck, options.device);
  return std::make_unique<LlamaModel>(std::move(ck));
}

bool Model::has_cuda_kernels(const std::string&) {
  // Every architecture Model::load reads runs on CUDA: the Llama family,
  // Gemma 4 and Qwen 3.5 (its recurrent kernels: docs/cuda.md, "Qwen 3.5").
  return true;
}

}  // namespace brioche::model
