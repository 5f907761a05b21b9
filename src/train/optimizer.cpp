#include "train/optimizer.h"

#include <cmath>

#include "core/error.h"

namespace brioche::train {

LrSchedule parse_lr_schedule(const std::string& name) {
  if (name == "cosine") return LrSchedule::Cosine;
  if (name == "linear") return LrSchedule::Linear;
  if (name == "constant") return LrSchedule::Constant;
  fail("lr_schedule: expected cosine, linear or constant, got '", name, "'");
}

std::string lr_schedule_name(LrSchedule s) {
  return s == LrSchedule::Cosine ? "cosine" : s == LrSchedule::Linear ? "linear" : "constant";
}

float learning_rate_at(const ScheduleConfig& c, int step) {
  if (c.warmup > 0 && step < c.warmup) return c.learning_rate * float(step + 1) / float(c.warmup);
  if (c.schedule == LrSchedule::Constant) return c.learning_rate;
  const int decay_steps = std::max(1, c.total_steps - c.warmup);
  const double progress = std::min(1.0, double(step - c.warmup) / double(decay_steps));
  if (c.schedule == LrSchedule::Linear) return float(c.learning_rate * (1.0 - progress));
  return float(c.learning_rate * 0.5 * (1.0 + std::cos(M_PI * progress)));
}

double clip_grad_norm(LoraAdapter& adapter, double max_norm) {
  double sum_sq = 0.0;
  auto entries = adapter.entries();
  for (auto& e : entries) {
    for (const Tensor* g : {&e.factors->grad_a, &e.factors->grad_b}) {
      const float* p = g->data_as<float>();
      for (int64_t i = 0; i < g->numel(); ++i) sum_sq += double(p[i]) * p[i];
    }
  }
  const double norm = std::sqrt(sum_sq);
  if (max_norm > 0 && norm > max_norm) {
    const float s = float(max_norm / (norm + 1e-6));
    for (auto& e : entries) {
      for (Tensor* g : {&e.factors->grad_a, &e.factors->grad_b}) {
        float* p = g->data_as<float>();
        for (int64_t i = 0; i < g->numel(); ++i) p[i] *= s;
      }
    }
  }
  return norm;
}

AdamW::AdamW(LoraAdapter& adapter, const AdamWConfig& config) : config_(config) {
  for (auto& e : adapter.entries()) {
    slots_.push_back({&e.factors->a, &e.factors->grad_a, std::vector<float>(size_t(e.factors->a.numel())),
                      std::vector<float>(size_t(e.factors->a.numel())), false});
    slots_.push_back({&e.factors->b, &e.factors->grad_b, std::vector<float>(size_t(e.factors->b.numel())),
                      std::vector<float>(size_t(e.factors->b.numel())), true});
  }
}

void AdamW::step(float lr) {
  ++t_;
  const float b1 = config_.beta1, b2 = config_.beta2;
  const float c1 = 1.0f - std::pow(b1, float(t_)), c2 = 1.0f - std::pow(b2, float(t_));
  for (auto& s : slots_) {
    const float slot_lr = s.is_b ? lr * config_.lora_plus_ratio : lr;
    float* p = s.param->data_as<float>();
    const float* g = s.grad->data_as<float>();
    for (size_t i = 0; i < s.m.size(); ++i) {
      p[i] -= slot_lr * config_.weight_decay * p[i];
      s.m[i] = b1 * s.m[i] + (1.0f - b1) * g[i];
      s.v[i] = b2 * s.v[i] + (1.0f - b2) * g[i] * g[i];
      p[i] -= slot_lr * (s.m[i] / c1) / (std::sqrt(s.v[i] / c2) + config_.eps);
    }
  }
}

}  // namespace brioche::train
