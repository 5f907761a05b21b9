// AdamW over the LoRA factors, learning-rate schedules and gradient clipping.
//
// AdamW (Loshchilov & Hutter; PyTorch's torch.optim.AdamW):
//   p ← p − lr·wd·p;  m ← β1 m + (1−β1) g;  v ← β2 v + (1−β2) g²
//   p ← p − lr · (m / (1−β1ᵗ)) / (sqrt(v / (1−β2ᵗ)) + ε)
// LoRA+ (Hayou et al. 2024): B factors use lr · lora_plus_ratio.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "train/lora.h"

namespace brioche::train {

enum class LrSchedule : uint8_t { Cosine, Linear, Constant };
LrSchedule parse_lr_schedule(const std::string& name);  // "cosine" | "linear" | "constant"
std::string lr_schedule_name(LrSchedule s);

struct ScheduleConfig {
  float learning_rate = 1e-4f;
  LrSchedule schedule = LrSchedule::Cosine;
  int warmup = 0;       // steps of linear warmup from 0
  int total_steps = 1;  // decay reaches 0 at total_steps (cosine/linear)
};
// Learning rate for optimizer step `step` (0-based).
float learning_rate_at(const ScheduleConfig& config, int step);

// Global L2 norm of all LoRA gradients; scales them to max_norm when above (max_norm > 0).
double clip_grad_norm(LoraAdapter& adapter, double max_norm);

struct AdamWConfig {
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  float weight_decay = 0.0f;
  float lora_plus_ratio = 1.0f;  // lr multiplier of the B factors
};

class AdamW {
 public:
  AdamW(LoraAdapter& adapter, const AdamWConfig& config);
  void step(float lr);  // uses and keeps the gradients; call zero_grads after
  int steps_taken() const { return t_; }

 private:
  struct Slot {
    Tensor* param;
    Tensor* grad;
    std::vector<float> m, v;
    bool is_b;
  };
  AdamWConfig config_;
  std::vector<Slot> slots_;
  int t_ = 0;
};

}  // namespace brioche::train
