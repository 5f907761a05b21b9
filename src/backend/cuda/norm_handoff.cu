#include "backend/cuda/norm_handoff.h"

#include <utility>

#include "backend/cuda/kernels.h"
#include "backend/cuda/runtime.h"
#include "core/env_switch.h"
#include "core/error.h"

namespace brioche::cuda::detail {

namespace {

// Per host thread (tests: handed_norms_read).
thread_local int64_t handed_reads = 0;

}  // namespace

HandedNorm begin_handoff(const GemvArgs& a, bool hands_on) {
  // BRIOCHE_CUDA_NORM_HANDOFF=0 keeps the norm kernels (A/B runs).
  static const bool on = env_switch_on("BRIOCHE_CUDA_NORM_HANDOFF");
  const float* norm_w = a.hand_on.norm_w;
  if (!on || !a.accumulate || !hands_on || norm_w == nullptr || a.hand_on.handed == nullptr || a.n != 1 ||
      a.n_parts != 1)
    return {};
  return {.y = a.parts[0].y, .norm_w = norm_w, .x = allocate_int8_acts(1, a.m), .sums = allocate(size_t(a.m / 32) * 4)};
}

void hand_on(const GemvArgs& a, HandedNorm norm) { *a.hand_on.handed = std::make_shared<HandedNorm>(std::move(norm)); }

const HandedNorm* handed_norm_for(const void* handed, const float* x, const float* norm_w) {
  if (handed == nullptr) return nullptr;
  const auto* h = static_cast<const HandedNorm*>(handed);
  BRIOCHE_CHECK(h->y == x && h->norm_w == norm_w, "norm handoff: the norm handed on is of y at ",
                static_cast<const void*>(h->y), " with the norm weight at ", static_cast<const void*>(h->norm_w),
                ", but the reading GEMV normalizes x at ", static_cast<const void*>(x), " with the one at ",
                static_cast<const void*>(norm_w));
  return h;
}

int64_t handed_norms_read() { return handed_reads; }
void count_handed_norm_read() { ++handed_reads; }

}  // namespace brioche::cuda::detail
