#include "backend/cuda/norm_handoff.h"

#include <utility>

#include "backend/cuda/kernels.h"
#include "backend/cuda/runtime.h"
#include "core/env_switch.h"

namespace brioche::cuda::detail {

namespace {

// Per host thread: a decode step is queued by one thread (a tensor-parallel
// rank's thread has its own).
struct Handoff {
  const float* expected_y = nullptr;
  const float* expected_norm_w = nullptr;
  HandedNorm handed;
  int64_t read = 0;
};
thread_local Handoff handoff;

}  // namespace

void expect_norm(const float* y, const float* norm_w) {
  handoff.expected_y = y;
  handoff.expected_norm_w = norm_w;
}

HandedNorm begin_handoff(const GemvArgs& a, bool hands_on) {
  // BRIOCHE_CUDA_NORM_HANDOFF=0 keeps the norm kernels (A/B runs).
  static const bool on = env_switch_on("BRIOCHE_CUDA_NORM_HANDOFF");
  if (!a.accumulate) return {};  // (the request is for the next launch that adds to y)
  const float* y = std::exchange(handoff.expected_y, nullptr);
  const float* norm_w = std::exchange(handoff.expected_norm_w, nullptr);
  if (!on || !hands_on || y == nullptr || norm_w == nullptr || a.n != 1 || a.n_parts != 1 || a.parts[0].y != y)
    return {};
  return {.y = y, .norm_w = norm_w, .x = allocate_int8_acts(1, a.m), .sums = allocate(size_t(a.m / 32) * 4)};
}

void hand_on(HandedNorm norm) { handoff.handed = std::move(norm); }

HandedNorm take_handed_norm(const float* x, const float* norm_w) {
  HandedNorm h = std::exchange(handoff.handed, {});
  if (!h || h.y != x || h.norm_w != norm_w) return {};
  return h;
}

int64_t handed_norms_read() { return handoff.read; }
void count_handed_norm_read() { ++handoff.read; }

}  // namespace brioche::cuda::detail

namespace brioche::cuda {

void expect_rms_norm(const float* y, const float* norm_w) { detail::expect_norm(y, norm_w); }

}  // namespace brioche::cuda
