// What the trainer needs of a base model, whatever its architecture: its
// sizes, LM head, the shapes of its LoRA sites, how to build its training
// stack and how to read and write its adapters. llama_train_base serves the
// Llama family (model::Checkpoint), gemma4_train_base Gemma 4,
// qwen35_train_base Qwen 3.5.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "model/gemma4_weights.h"
#include "model/model.h"
#include "model/qwen35_weights.h"
#include "model/weights.h"
#include "train/adapter_io.h"
#include "train/lora.h"
#include "train/train_model.h"
#include "train/train_stack.h"

namespace brioche::train {

struct TrainBase {
  const model::ModelConfig* config = nullptr;
  const Tensor* output = nullptr;  // LM head [V, H]
  float logit_softcap = 0.0f;      // Gemma: logits are cap·tanh(z/cap); 0: none
  LoraShapes shapes;               // each layer's projection shapes (empty: module_shape for all)
  Device device = Device::CPU;     // where the weights live
  std::function<std::unique_ptr<TrainStack>(LoraAdapter*, const TrainModelOptions&)> make_stack;
  std::function<std::unique_ptr<LoraAdapter>(const std::string& dir)> load_adapter;
  std::function<void(const std::string& dir, LoraAdapter&, const AdapterWriteInfo&)> save_adapter;
  std::string huggingface_repo_id;  // empty when the model does not name it
};

// The per-layer LoRA shapes of a loaded model (Gemma 4's), or empty where
// every layer has the config's shapes (load_adapter then uses module_shape).
// For serving unmerged; a Qwen 3.5 model refuses (its adapters merge at load).
LoraShapes lora_shapes_of(const model::Model& model);

// Both keep a reference to the checkpoint: it must outlive the TrainBase.
TrainBase llama_train_base(const model::Checkpoint& checkpoint);
TrainBase gemma4_train_base(const model::Gemma4Checkpoint& checkpoint);
TrainBase qwen35_train_base(const model::Qwen35Checkpoint& checkpoint);

}  // namespace brioche::train
