// One objective evaluation on a batch: stack forward → per-token log-probs →
// loss → (optionally) head backward → stack backward (LoRA grads +=).
#pragma once

#include <span>
#include <vector>

#include "train/lm_head.h"
#include "train/losses.h"
#include "train/train_model.h"

namespace brioche::train {

struct ObjectiveOptions {
  uint64_t dropout_seed = 0;
  double grad_scale = 1.0;             // 1 / grad_accumulation_steps
  bool backward = true;                // false: value and metrics only (eval)
  const Tensor* prefix_out = nullptr;  // cached frozen-prefix output for this batch, or null
};

LossValue run_objective(TrainStack& model, LogpHead& head, const TokenBatch& batch, const LossConfig& loss,
                        std::span<const SequenceLogps> reference, const ObjectiveOptions& options);

// Per-sequence log-probs without gradients; adapter_enabled=false gives the
// frozen base (DPO/IPO reference).
std::vector<SequenceLogps> batch_logps(TrainStack& model, LogpHead& head, const TokenBatch& batch, bool adapter_enabled,
                                       const Tensor* prefix_out = nullptr);

}  // namespace brioche::train
