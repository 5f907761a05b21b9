// AdamW over the LoRA factors, learning-rate schedules and gradient clipping.
//
// AdamW (Loshchilov & Hutter; PyTorch's torch.optim.AdamW):
//   p ← p − lr·wd·p;  m ← β1 m + (1−β1) g;  v ← β2 v + (1−β2) g²
//   p ← p − lr · (m / (1−β1ᵗ)) / (sqrt(v / (1−β2ᵗ)) + ε)
// LoRA+ (Hayou et al. 2024): B factors use lr · lora_plus_ratio.
#pragma once

#include <cstdint>
#include <string>

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

// Global L2 norm of all LoRA gradients (on the adapter's device; one number crosses).
double grad_norm(const LoraAdapter& adapter);
// The factor that brings a gradient of norm `norm` down to max_norm (1 when
// below, or max_norm <= 0): max_norm / (norm + 1e-6).
float clip_factor(double norm, double max_norm);
// grad_norm, then scales the gradients to max_norm when above (max_norm > 0).
double clip_grad_norm(LoraAdapter& adapter, double max_norm);

struct AdamWConfig {
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  float weight_decay = 0.0f;
  float lora_plus_ratio = 1.0f;  // lr multiplier of the B factors
};

// Runs on the adapter's device (ops::adamw_step: one launch for A and B);
// moments are f32 tensors there. Construct after LoraAdapter::to_device.
class AdamW {
 public:
  AdamW(LoraAdapter& adapter, const AdamWConfig& config);
  // Uses the gradients times grad_scale (clip_factor) and keeps them; call zero_grads after.
  void step(float lr, float grad_scale = 1.0f);
  int steps_taken() const { return t_; }

  // The moments and step count, for a checkpoint that resumes exactly
  // (train/train_state.h): save a copy; restore checks the shapes.
  struct State {
    Tensor m_a, v_a, m_b, v_b;  // f32 [n] on the adapter's device
    int t = 0;
  };
  State state() const { return {m_a_, v_a_, m_b_, v_b_, t_}; }
  void restore(const State& state);

 private:
  LoraAdapter& adapter_;
  AdamWConfig config_;
  Tensor m_a_, v_a_, m_b_, v_b_;  // f32, shaped like the adapter's flat A and B buffers
  int t_ = 0;
};

}  // namespace brioche::train
