#include "backend/cpu/gated_delta_rule_chunk_backward.h"

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/delta_rule_gemm.h"
#include "backend/cpu/gated_delta_rule_chunk_backward_impl.h"

namespace brioche::backend::cpu::detail {

namespace {

struct Avx2Gemm {
  static void accumulate_rows(float* const* y, const float* const* coef, int n_rows, int K, const float* x, int64_t ldx,
                              int n) {
    cpu::accumulate_rows(y, coef, n_rows, K, x, ldx, n);
  }
  static void dot_rows(const float* a, int64_t lda, int m_a, const float* b, int64_t ldb, int m_b, int n, float* y,
                       int64_t ldy) {
    cpu::dot_rows(a, lda, m_a, b, ldb, m_b, n, y, ldy);
  }
};

}  // namespace

void chunked_head_backward(const GatedDeltaRuleBackwardArgs& args, const NormedKeys& normed, int h,
                           const ops::RecurrentSequence& seq, float* dqh, float* dkh) {
  switch (brioche::cpu::active_isa()) {
    case brioche::cpu::Isa::Avx512:
    case brioche::cpu::Isa::Avx512Vnni: chunked_head_backward_avx512(args, normed, h, seq, dqh, dkh); return;
    default: ChunkedBackward<Avx2Gemm>(args, normed, h, dqh, dkh).run(seq);
  }
}

}  // namespace brioche::backend::cpu::detail
