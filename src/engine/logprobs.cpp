#include "engine/logprobs.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/cpu/vec_f32.h"
#include "core/error.h"

namespace brioche::engine {

double log_softmax_normalizer(std::span<const float> logits) {
  BRIOCHE_CHECK(!logits.empty(), "log_softmax_normalizer: expected a non-empty logits row, got 0 entries");
  float max_logit = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < logits.size(); ++i) {
    const float x = logits[i];
    BRIOCHE_CHECK(!std::isnan(x) && x != std::numeric_limits<float>::infinity(),
                  "log_softmax_normalizer: expected finite or -inf logits, found ", x, " at token ", i);
    max_logit = std::max(max_logit, x);
  }
  if (max_logit == -std::numeric_limits<float>::infinity()) return max_logit;
  // Sum of exp(x - m): 8 at a time with the vector exp (~2e-7 relative per
  // term, so log Z is off by ~1e-7: far below the 1e-5 clients see), in
  // float over 256-token blocks and double across them. A scalar double exp
  // per token was ~0.4 ms per 49k row.
  double sum = 0.0;
  size_t i = 0;
  const size_t n = logits.size();
#if BRIOCHE_VEC_AVX2
  const __m256 max_v = _mm256_set1_ps(max_logit);
  const __m256 neg_inf_v = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  while (i + 8 <= n) {
    __m256 block = _mm256_setzero_ps();
    for (const size_t end = std::min(n, i + 256); i + 8 <= end; i += 8) {
      const __m256 x = _mm256_loadu_ps(logits.data() + i);
      const __m256 finite = _mm256_cmp_ps(x, neg_inf_v, _CMP_GT_OQ);  // exp(-inf) = 0, not exp256's clamp
      block = _mm256_add_ps(block, _mm256_and_ps(finite, backend::cpu::exp256(_mm256_sub_ps(x, max_v))));
    }
    sum += double(backend::cpu::hsum256(block));
  }
#endif
  for (; i < n; ++i) sum += std::exp(double(logits[i]) - double(max_logit));
  return double(max_logit) + std::log(sum);
}

std::vector<std::pair<int32_t, float>> top_logprobs(std::span<const float> logits, int n, double log_normalizer) {
  const int vocab = int(logits.size());
  n = std::clamp(n, 0, vocab);
  // "a ranks before b": larger logit first, lower id on ties.
  auto ranks_before = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  // Min-heap (by rank) of the best n seen so far: its front is the weakest.
  std::vector<int32_t> heap;
  heap.reserve(size_t(n));
  for (int32_t id = 0; id < vocab && n > 0; ++id) {
    if (int(heap.size()) < n) {
      heap.push_back(id);
      std::push_heap(heap.begin(), heap.end(), ranks_before);
    } else if (ranks_before(id, heap.front())) {
      std::pop_heap(heap.begin(), heap.end(), ranks_before);
      heap.back() = id;
      std::push_heap(heap.begin(), heap.end(), ranks_before);
    }
  }
  std::sort(heap.begin(), heap.end(), ranks_before);
  std::vector<std::pair<int32_t, float>> top;
  top.reserve(heap.size());
  for (const int32_t id : heap) top.emplace_back(id, float(double(logits[id]) - log_normalizer));
  return top;
}

}  // namespace brioche::engine
