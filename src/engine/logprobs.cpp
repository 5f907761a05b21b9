#include "engine/logprobs.h"

#include <algorithm>
#include <cmath>
#include <limits>

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
  double sum = 0.0;
  for (const float x : logits) sum += std::exp(double(x) - double(max_logit));
  return double(max_logit) + std::log(sum);
}

std::vector<std::pair<int32_t, float>> top_logprobs(std::span<const float> logits, int n,
                                                    double log_normalizer) {
  const int vocab = int(logits.size());
  n = std::clamp(n, 0, vocab);
  // "a ranks before b": larger logit first, lower id on ties.
  auto ranks_before = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
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
