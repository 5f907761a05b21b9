#include "train/optimizer.h"

#include <cmath>
#include <tuple>

#include "core/error.h"
#include "ops/adamw.h"
#include "ops/device.h"
#include "ops/scaled_add.h"

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

double grad_norm(const LoraAdapter& adapter) {
  const LoraFlat& f = adapter.flat();
  const Tensor* grads[] = {&f.grad_a, &f.grad_b};
  return std::sqrt(ops::sum_of_squares(grads));
}

float clip_factor(double norm, double max_norm) {
  return max_norm > 0 && norm > max_norm ? float(max_norm / (norm + 1e-6)) : 1.0f;
}

double clip_grad_norm(LoraAdapter& adapter, double max_norm) {
  const double norm = grad_norm(adapter);
  const float s = clip_factor(norm, max_norm);
  if (s != 1.0f) {
    for (Tensor* g : {&adapter.flat().grad_a, &adapter.flat().grad_b}) ops::scale(*g, s);
  }
  return norm;
}

AdamW::AdamW(LoraAdapter& adapter, const AdamWConfig& config) : adapter_(adapter), config_(config) {
  const Device dev = adapter.device();
  const LoraFlat& f = adapter.flat();
  m_a_ = ops::zeros(DType::F32, {f.a.numel()}, dev);
  v_a_ = ops::zeros(DType::F32, {f.a.numel()}, dev);
  m_b_ = ops::zeros(DType::F32, {f.b.numel()}, dev);
  v_b_ = ops::zeros(DType::F32, {f.b.numel()}, dev);
}

void AdamW::restore(const State& s) {
  for (auto [from, to, name] :
       {std::tuple{&s.m_a, &m_a_, "m_a"}, {&s.v_a, &v_a_, "v_a"}, {&s.m_b, &m_b_, "m_b"}, {&s.v_b, &v_b_, "v_b"}}) {
    BRIOCHE_CHECK(from->defined() && from->dtype() == DType::F32 && from->numel() == to->numel(), "AdamW: moment ",
                  name, " of the checkpoint has ", from->defined() ? from->numel() : 0, " values, this adapter ",
                  to->numel());
    Tensor dst = *to;
    ops::copy(from->reshape({to->numel()}), dst);
  }
  t_ = s.t;
}

void AdamW::step(float lr, float grad_scale) {
  ++t_;
  LoraFlat& f = adapter_.flat();
  const ops::AdamWSlot slots[] = {
      {.param = &f.a, .grad = &f.grad_a, .m = &m_a_, .v = &v_a_, .lr_scale = 1.0f},
      {.param = &f.b, .grad = &f.grad_b, .m = &m_b_, .v = &v_b_, .lr_scale = config_.lora_plus_ratio}};
  ops::adamw_step(slots, {.lr = lr,
                          .beta1 = config_.beta1,
                          .beta2 = config_.beta2,
                          .eps = config_.eps,
                          .weight_decay = config_.weight_decay,
                          .step = t_,
                          .grad_scale = grad_scale});
}

}  // namespace brioche::train
