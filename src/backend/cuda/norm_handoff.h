// The norm handoff of a decode step: the GEMV that adds to the residual y
// (o_proj, down_proj) also writes the RMSNorm of y that the next block's
// first GEMV (gate/up, Q/K/V, the lm_head) reads, so no norm kernel runs
// between them. One x row, both GEMVs on the streamed int8 path
// (gemv_stream_rows.cu).
//
// The math. RMSNorm is x̂_i = r·y_i·g_i with r = (Σ_j y_j² / k + eps)^(−1/2),
// one scalar over all of y; the int8 GEMV reads x̂ as blocks of 32 values
// q·d (gemv_int8.cuh). Quantizing u = y ⊙ g instead (d_u = max|u| / 127,
// q = round(u / d_u)) gives the same q, since r scales a block's values and
// their maximum alike, and d = r·d_u. Every integer dot product is linear in
// a block's (d, d·Σq), so the reading GEMV multiplies each output by r. r
// needs Σ y² over all of y, which no CTA of the writer has: each CTA owns one
// block of 32 rows and writes its q, (d_u, d_u·Σq) and Σ y² over it, and
// every reading warp adds the k/32 sums in one order (the same bits
// whichever CTA finished first). q differs from the norm kernel's only where
// u / d_u and x̂ / d round to different sides of a half (float rounding),
// and the outputs by float rounding (NMSE ~1e-13 against the norm kernel's
// path: CudaFusedMatmul.StreamedNormHandoffMatchesNormKernels).
//
// The model asks for it through ops::NormHandoff, a value it passes to
// both ops: the writer's launch gets the request as GemvArgs::hand_on (the
// norm weight, and where to put what it wrote), the reader's as
// InputNorm::handed. No state lives here between launches; the ops layer
// checks that the reader reads the tensor the writer wrote, unwritten since
// (ops/norm_handoff.h).
#pragma once

#include <memory>

#include "backend/cuda/gemv.cuh"
#include "backend/cuda/gemv_int8.h"

namespace brioche::cuda::detail {

// RMSNorm(y) with norm_w as a GEMV that added to y left it.
struct HandedNorm {
  const float* y = nullptr;  // nothing handed on when null
  const float* norm_w = nullptr;
  Int8Scratch x;
  std::shared_ptr<void> sums;  // float [k / 32]: Σ y² per block

  explicit operator bool() const { return y != nullptr; }
  float* sum_sq() const { return static_cast<float*>(sums.get()); }
  // Where the launch that hands it on writes it (nothing when empty).
  NormedOut written_as() const {
    if (y == nullptr) return {};
    return {.norm_w = norm_w, .q = x.q, .ds = x.ds, .sum_sq = sum_sq()};
  }
};

// For a launch `a` that adds to y: when it carries a request
// (a.hand_on.norm_w) and can write the norm (`hands_on`: the streamed int8
// GEMV, gemv_stream_rows_hands_on; one x row, one part), returns new scratch
// for the launch to write (written_as) and for hand_on once it is queued.
// Otherwise returns nothing.
HandedNorm begin_handoff(const GemvArgs& a, bool hands_on);
// Puts `norm` where the launch's request says (a.hand_on.handed).
void hand_on(const GemvArgs& a, HandedNorm norm);

// The handed norm an op passes on (InputNorm::handed), checked against the
// reading launch's x and norm weight: they must be what it was written for.
const HandedNorm* handed_norm_for(const void* handed, const float* x, const float* norm_w);

// Launches on this host thread that read a handed-on norm (tests: the
// handoff happened). gemv_int8_handed counts them.
int64_t handed_norms_read();
void count_handed_norm_read();

}  // namespace brioche::cuda::detail
