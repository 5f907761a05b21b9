#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "backend/cpu/vec_f32.h"
#include "core/error.h"
#include "engine/logprobs.h"

namespace brioche::engine {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// vLLM's _SAMPLING_EPS: below this temperature sampling is greedy.
constexpr float kGreedyTemperature = 1e-5f;
// Top-p sorts a flat candidate set in growing partial selections: first the
// best kFirstNucleus, then 8x more, and so on, until the mass reaches top_p.
constexpr size_t kFullSortBelow = 4096;
constexpr size_t kFirstNucleus = 1024;
// Token weights are summed in blocks of this many tokens (kept as doubles),
// so the draw walks ~200 block sums and then one block, not the vocabulary.
constexpr size_t kMassBlock = 256;

// Buffers of vocab size, reused across calls on the same thread, so that a
// Sampler (one per request) holds no per-vocab memory of its own.
struct Scratch {
  std::vector<float> raw_logits;   // [vocab] copy kept for raw logprobs
  std::vector<float> values;       // [vocab] for nth_element (top-k)
  std::vector<float> weight;       // [vocab] exp(l - max) of candidates, 0 elsewhere
  std::vector<double> block_mass;  // [ceil(vocab / kMassBlock)] sum of weight per block
  std::vector<uint64_t> order;     // [n_candidates] rank_key, best first once sorted (top-p)
  std::vector<uint64_t> seen;      // [ceil(vocab / 64)] bitset for distinct tokens
  std::vector<int32_t> sorted_output;
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// Max of the row, checking that every entry is finite or -inf (`x < +inf`
// is false exactly for NaN and +inf). AVX2 when compiled for it (the x86
// baseline), with independent accumulators either way: a single running max
// is bound by the compare latency, several times slower over 262k entries.
float checked_max(std::span<const float> row) {
  const float* x = row.data();
  const size_t n = row.size();
  const float inf = std::numeric_limits<float>::infinity();
  size_t i = 0;
  float max_value = kNegInf;
  bool ok = true;
#if defined(__AVX2__)
  __m256 max0 = _mm256_set1_ps(kNegInf), max1 = max0;
  __m256 bad = _mm256_setzero_ps();
  const __m256 pos_inf = _mm256_set1_ps(inf);
  for (; i + 16 <= n; i += 16) {
    const __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
    bad =
        _mm256_or_ps(bad, _mm256_or_ps(_mm256_cmp_ps(a, pos_inf, _CMP_NLT_UQ), _mm256_cmp_ps(b, pos_inf, _CMP_NLT_UQ)));
    max0 = _mm256_max_ps(max0, a);
    max1 = _mm256_max_ps(max1, b);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, _mm256_max_ps(max0, max1));
  for (const float lane : lanes) max_value = std::max(max_value, lane);
  ok = _mm256_movemask_ps(bad) == 0;
#else
  float lane_max[4] = {kNegInf, kNegInf, kNegInf, kNegInf};
  for (; i + 4 <= n; i += 4) {
    for (int k = 0; k < 4; ++k) {
      ok &= x[i + size_t(k)] < inf;
      lane_max[k] = std::max(lane_max[k], x[i + size_t(k)]);
    }
  }
  for (const float lane : lane_max) max_value = std::max(max_value, lane);
#endif
  for (; i < n; ++i) {
    ok &= x[i] < inf;
    max_value = std::max(max_value, x[i]);
  }
  if (!ok) {
    for (size_t j = 0; j < n; ++j) {
      BRIOCHE_CHECK(x[j] < inf, "Sampler: expected finite or -inf logits, found ", x[j], " at token ", j);
    }
  }
  return max_value;
}

// Sort key for "larger logit first, then lower id": the float's bits mapped
// to an unsigned order (negatives reversed), inverted, above the token id.
// Sorting plain integers is several times faster than an indirect comparator.
uint64_t rank_key(float logit, int32_t id) {
  uint32_t bits;
  std::memcpy(&bits, &logit, 4);
  const uint32_t ascending = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
  return (uint64_t(~ascending) << 32) | uint32_t(id);
}

// l[i] = l[i] / divisor: a division (not a multiplication by 1/T) to match
// HF bit for bit, 8 at a time (IEEE division, the same bits as the scalar
// one; GCC leaves the plain loop scalar at -O2).
void divide_all(std::span<float> logits, float divisor) {
  size_t i = 0;
#if BRIOCHE_VEC_AVX2
  const __m256 d = _mm256_set1_ps(divisor);
  for (; i + 8 <= logits.size(); i += 8) {
    _mm256_storeu_ps(logits.data() + i, _mm256_div_ps(_mm256_loadu_ps(logits.data() + i), d));
  }
#endif
  for (; i < logits.size(); ++i) logits[i] = logits[i] / divisor;
}

// weight[i] = exp(l[i] - max_logit) for the tokens with l[i] >= bound and
// l[i] > -inf, 0 for the others; block_mass[b] = the sum of block b's
// weights. Vector exp (vec_f32.h, ~2e-7 relative error against std::exp)
// over 8 tokens at a time: a scalar exp per token was ~0.4 ms per 49k-token
// row, a visible part of a 16-sequence decode step.
void weigh_tokens(std::span<const float> logits, float max_logit, float bound, std::vector<float>& weight,
                  std::vector<double>& block_mass) {
  const size_t vocab = logits.size();
  weight.resize(vocab);
  block_mass.assign((vocab + kMassBlock - 1) / kMassBlock, 0.0);
  for (size_t b = 0; b < block_mass.size(); ++b) {
    const size_t begin = b * kMassBlock, end = std::min(vocab, begin + kMassBlock);
    size_t i = begin;
    float mass = 0.0f;
#if BRIOCHE_VEC_AVX2
    const __m256 max_v = _mm256_set1_ps(max_logit), bound_v = _mm256_set1_ps(bound);
    const __m256 neg_inf_v = _mm256_set1_ps(kNegInf);
    __m256 mass_v = _mm256_setzero_ps();
    for (; i + 8 <= end; i += 8) {
      const __m256 l = _mm256_loadu_ps(logits.data() + i);
      const __m256 keep = _mm256_and_ps(_mm256_cmp_ps(l, bound_v, _CMP_GE_OQ), _mm256_cmp_ps(l, neg_inf_v, _CMP_GT_OQ));
      const __m256 w = _mm256_and_ps(keep, backend::cpu::exp256(_mm256_sub_ps(l, max_v)));
      _mm256_storeu_ps(weight.data() + i, w);
      mass_v = _mm256_add_ps(mass_v, w);
    }
    mass = backend::cpu::hsum256(mass_v);
#endif
    for (; i < end; ++i) {
      const float l = logits[i];
      // Clamped as exp256 is: a finite token never weighs exactly 0.
      weight[i] = l >= bound && l != kNegInf ? std::exp(std::max(l - max_logit, -87.0f)) : 0.0f;
      mass += weight[i];
    }
    block_mass[b] = double(mass);
  }
}

// Weight levels: thresholds 2^-1, 2^-2, 2^-4, 2^-8, 2^-12, 2^-16, 2^-24,
// 2^-32, 2^-64 and "any weight", with the number and the mass of the tokens
// at or above each, from one vector pass. Top-k and top-p use them to pick a
// threshold that surely holds what they look for, and then look only at the
// tokens above it.
constexpr int kWeightLevels = 10;
constexpr int kLevelExponents[kWeightLevels - 1] = {1, 2, 4, 8, 12, 16, 24, 32, 64};
struct WeightLevels {
  float threshold[kWeightLevels];
  size_t count[kWeightLevels];
  double mass[kWeightLevels];  // float sums: only for choosing a level
};

WeightLevels weight_levels(std::span<const float> weight) {
  WeightLevels levels;
  for (int j = 0; j < kWeightLevels - 1; ++j) levels.threshold[j] = std::ldexp(1.0f, -kLevelExponents[j]);
  levels.threshold[kWeightLevels - 1] = std::numeric_limits<float>::denorm_min();
  size_t i = 0;
  uint32_t count[kWeightLevels] = {};
  float mass[kWeightLevels] = {};
#if BRIOCHE_VEC_AVX2
  __m256i count_v[kWeightLevels];
  __m256 mass_v[kWeightLevels], threshold_v[kWeightLevels];
  for (int j = 0; j < kWeightLevels; ++j) {
    count_v[j] = _mm256_setzero_si256();
    mass_v[j] = _mm256_setzero_ps();
    threshold_v[j] = _mm256_set1_ps(levels.threshold[j]);
  }
  for (; i + 8 <= weight.size(); i += 8) {
    const __m256 w = _mm256_loadu_ps(weight.data() + i);
    // Unrolled so that the per-level accumulators stay in registers.
#pragma GCC unroll 10
    for (int j = 0; j < kWeightLevels; ++j) {
      const __m256 at_or_above = _mm256_cmp_ps(w, threshold_v[j], _CMP_GE_OQ);
      count_v[j] = _mm256_sub_epi32(count_v[j], _mm256_castps_si256(at_or_above));  // mask -1 counts one
      mass_v[j] = _mm256_add_ps(mass_v[j], _mm256_and_ps(at_or_above, w));
    }
  }
  for (int j = 0; j < kWeightLevels; ++j) {
    alignas(32) uint32_t lanes[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), count_v[j]);
    for (const uint32_t lane : lanes) count[j] += lane;
    mass[j] = backend::cpu::hsum256(mass_v[j]);
  }
#endif
  for (; i < weight.size(); ++i) {
    for (int j = 0; j < kWeightLevels; ++j) {
      if (weight[i] >= levels.threshold[j]) {
        ++count[j];
        mass[j] += weight[i];
      }
    }
  }
  for (int j = 0; j < kWeightLevels; ++j) {
    levels.count[j] = count[j];
    levels.mass[j] = double(mass[j]);
  }
  return levels;
}

// The threshold of the first (highest) level that meets `enough`, lowered
// by a margin of 1e-3 relative: the vector exp may misorder tokens by an
// ulp or two at a threshold. The lowest level ("any weight") meets anything.
template <class Enough>
float first_threshold(const WeightLevels& levels, Enough enough) {
  for (int j = 0; j < kWeightLevels - 1; ++j) {
    if (enough(j)) return levels.threshold[j] * 0.999f;
  }
  return levels.threshold[kWeightLevels - 1];
}

// Calls fn(i) for every token with weight >= threshold, in ascending order.
template <class Fn>
void for_weights_from(std::span<const float> weight, float threshold, Fn fn) {
  size_t i = 0;
#if BRIOCHE_VEC_AVX2
  const __m256 t = _mm256_set1_ps(threshold);
  for (; i + 8 <= weight.size(); i += 8) {
    uint32_t bits = uint32_t(_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(weight.data() + i), t, _CMP_GE_OQ)));
    while (bits != 0) {
      fn(i + size_t(__builtin_ctz(bits)));
      bits &= bits - 1;
    }
  }
#endif
  for (; i < weight.size(); ++i) {
    if (weight[i] >= threshold) fn(i);
  }
}

// The k-th largest logit among the tokens with weight > 0 (ties included),
// or -inf when fewer than k have weight. Only the tokens above the first
// level that holds at least k of them go through nth_element (tens to a few
// thousand, not the vocabulary).
float kth_largest(std::span<const float> logits, std::span<const float> weight, size_t k, std::vector<float>& values) {
  const WeightLevels levels = weight_levels(weight);
  if (levels.count[kWeightLevels - 1] < k) return kNegInf;
  const float threshold = first_threshold(levels, [&](int j) { return levels.count[j] >= k; });
  values.clear();
  for_weights_from(weight, threshold, [&](size_t i) { values.push_back(logits[i]); });
  const auto kth = values.begin() + ptrdiff_t(k - 1);
  std::nth_element(values.begin(), kth, values.end(), std::greater<float>());
  return *kth;
}

// The weight threshold top-p looks above: the first level whose mass
// reaches the target (with 1e-4 to spare for the float sums; if that still
// misjudges, the walk finds no cut and the caller looks at every token).
float nucleus_threshold(const WeightLevels& levels, double target) {
  return first_threshold(levels, [&](int j) { return levels.mass[j] >= target * (1.0 + 1e-4); });
}

// Top-p over the tokens with weight >= threshold (the smallest positive
// float: every token with weight; with_weight of them have weight): walking
// them from most to least likely, a token is kept while the mass before it
// is < target. Returns the last kept token's logit, or nothing when the walk
// ran out of tokens without a cut and some were left out (the caller retries
// with all of them). Sorts in growing partial selections: first the best
// kFirstNucleus, then 8x more.
std::optional<float> nucleus_bound(std::span<const float> logits, std::span<const float> weight, double target,
                                   float threshold, size_t with_weight, std::vector<uint64_t>& order) {
  order.clear();
  for_weights_from(weight, threshold, [&](size_t i) { order.push_back(rank_key(logits[i], int32_t(i))); });
  const bool left_out = with_weight > order.size();
  if (order.empty()) return std::nullopt;
  size_t sorted_count = order.size() <= kFullSortBelow ? order.size() : kFirstNucleus;
  size_t walked = 0;
  double mass_before = 0.0;  // mass of the tokens ranked before order[walked]
  bool cut = false;
  while (!cut) {
    // order[0, sorted_count) are the best sorted_count tokens, in order.
    if (sorted_count < order.size())
      std::nth_element(order.begin() + ptrdiff_t(walked), order.begin() + ptrdiff_t(sorted_count), order.end());
    std::sort(order.begin() + ptrdiff_t(walked), order.begin() + ptrdiff_t(sorted_count));
    for (; walked < sorted_count; ++walked) {
      if (walked > 0 && mass_before >= target) {
        cut = true;
        break;
      }
      mass_before += weight[order[walked] & 0xFFFFFFFFu];
    }
    if (sorted_count == order.size()) break;  // everything walked
    sorted_count = std::min(order.size(), sorted_count * 8);
  }
  if (!cut && left_out) return std::nullopt;
  return logits[order[walked - 1] & 0xFFFFFFFFu];
}

// Truncation: tokens below `bound` get l = -inf and weight 0; block_mass is
// recomputed over the kept weights.
void drop_below(std::span<float> logits, float bound, std::vector<float>& weight, std::vector<double>& block_mass) {
  const size_t vocab = logits.size();
  for (size_t b = 0; b < block_mass.size(); ++b) {
    const size_t begin = b * kMassBlock, end = std::min(vocab, begin + kMassBlock);
    size_t i = begin;
    float mass = 0.0f;
#if BRIOCHE_VEC_AVX2
    const __m256 bound_v = _mm256_set1_ps(bound), neg_inf_v = _mm256_set1_ps(kNegInf);
    __m256 mass_v = _mm256_setzero_ps();
    for (; i + 8 <= end; i += 8) {
      const __m256 l = _mm256_loadu_ps(logits.data() + i);
      const __m256 keep = _mm256_cmp_ps(l, bound_v, _CMP_GE_OQ);
      const __m256 w = _mm256_and_ps(keep, _mm256_loadu_ps(weight.data() + i));
      _mm256_storeu_ps(weight.data() + i, w);
      _mm256_storeu_ps(logits.data() + i, _mm256_blendv_ps(neg_inf_v, l, keep));
      mass_v = _mm256_add_ps(mass_v, w);
    }
    mass = backend::cpu::hsum256(mass_v);
#endif
    for (; i < end; ++i) {
      if (logits[i] < bound) {
        logits[i] = kNegInf;
        weight[i] = 0.0f;
      }
      mass += weight[i];
    }
    block_mass[b] = double(mass);
  }
}

// Inverse CDF over the weights in ascending id order: the first token whose
// cumulative weight exceeds u * total. Block sums find the block, a walk
// inside it finds the token; the cumulative sum inside a block starts from
// the blocks before it, so rounding can only make the block's last kept
// token absorb a sliver of mass.
int32_t draw_token(std::span<const float> weight, std::span<const double> block_mass, double u) {
  double total = 0.0;
  for (const double m : block_mass) total += m;
  const double target = u * total;
  double cumulative = 0.0;  // mass of the blocks before `block`
  size_t block = block_mass.size();
  size_t last_block = 0;
  for (size_t b = 0; b < block_mass.size(); ++b) {
    if (block_mass[b] <= 0.0) continue;
    last_block = b;
    if (cumulative + block_mass[b] > target) {
      block = b;
      break;
    }
    cumulative += block_mass[b];
  }
  // u * total rounded up to the full total: the last kept token.
  const bool rounded_past_end = block == block_mass.size();
  if (rounded_past_end) block = last_block;
  const size_t begin = block * kMassBlock, end = std::min(weight.size(), begin + kMassBlock);
  int32_t last_kept = -1;
  for (size_t i = begin; i < end; ++i) {
    if (weight[i] <= 0.0f) continue;
    last_kept = int32_t(i);
    cumulative += weight[i];
    if (!rounded_past_end && cumulative > target) break;
  }
  return last_kept;
}

}  // namespace

Sampler::Sampler(SamplingParams params, int vocab_size)
    : params_(std::move(params)),
      vocab_size_(vocab_size),
      rng_(params_.seed ? *params_.seed : SamplerRng::random_seed()) {
  const SamplingParams& p = params_;
  BRIOCHE_CHECK(vocab_size > 0, "Sampler: expected vocab_size > 0, got ", vocab_size);
  BRIOCHE_CHECK(std::isfinite(p.temperature) && p.temperature >= 0.0f,
                "sampling params: expected temperature >= 0, got ", p.temperature);
  BRIOCHE_CHECK(p.top_k >= -1, "sampling params: expected top_k >= 0 (0 or -1: off), got ", p.top_k);
  BRIOCHE_CHECK(p.top_p >= 0.0f && p.top_p <= 1.0f, "sampling params: expected top_p in [0, 1], got ", p.top_p);
  BRIOCHE_CHECK(p.min_p >= 0.0f && p.min_p <= 1.0f, "sampling params: expected min_p in [0, 1], got ", p.min_p);
  BRIOCHE_CHECK(std::isfinite(p.repetition_penalty) && p.repetition_penalty > 0.0f,
                "sampling params: expected repetition_penalty > 0, got ", p.repetition_penalty);
  BRIOCHE_CHECK(std::isfinite(p.presence_penalty), "sampling params: expected a finite presence_penalty, got ",
                p.presence_penalty);
  BRIOCHE_CHECK(std::isfinite(p.frequency_penalty), "sampling params: expected a finite frequency_penalty, got ",
                p.frequency_penalty);
  BRIOCHE_CHECK(p.top_logprobs >= 0 && p.top_logprobs <= vocab_size, "sampling params: expected top_logprobs in [0, ",
                vocab_size, "], got ", p.top_logprobs);
  for (const auto& [token, bias] : p.logit_bias) {
    BRIOCHE_CHECK(token >= 0 && token < vocab_size, "sampling params: logit_bias token ", token,
                  " is outside the vocabulary [0, ", vocab_size, ")");
    BRIOCHE_CHECK(std::isfinite(bias), "sampling params: logit_bias for token ", token, " must be finite, got ", bias);
  }
}

bool Sampler::is_greedy() const { return params_.temperature < kGreedyTemperature; }

void Sampler::apply_penalties(std::span<float> logits, std::span<const int32_t> prompt,
                              std::span<const int32_t> output) const {
  const int vocab = vocab_size_;
  auto check_token = [vocab](int32_t token, const char* where) {
    BRIOCHE_CHECK(token >= 0 && token < vocab, "Sampler: ", where, " token ", token, " is outside the vocabulary [0, ",
                  vocab, ")");
  };

  const float r = params_.repetition_penalty;
  if (r != 1.0f && (!prompt.empty() || !output.empty())) {
    // Each distinct token once: a bitset marks the tokens already penalized.
    std::vector<uint64_t>& seen = scratch().seen;
    seen.assign(size_t(vocab + 63) / 64, 0);
    for (const auto history : {prompt, output}) {
      for (const int32_t token : history) {
        check_token(token, history.data() == prompt.data() ? "prompt" : "output");
        uint64_t& word = seen[size_t(token) >> 6];
        const uint64_t bit = uint64_t(1) << (token & 63);
        if (word & bit) continue;
        word |= bit;
        float& l = logits[size_t(token)];
        l = l > 0.0f ? l / r : l * r;
      }
    }
  }

  const float presence = params_.presence_penalty;
  const float frequency = params_.frequency_penalty;
  if ((presence != 0.0f || frequency != 0.0f) && !output.empty()) {
    std::vector<int32_t>& sorted = scratch().sorted_output;
    sorted.assign(output.begin(), output.end());
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 0; i < sorted.size();) {
      size_t j = i;
      while (j < sorted.size() && sorted[j] == sorted[i]) ++j;
      check_token(sorted[i], "output");
      const float count = float(j - i);
      logits[size_t(sorted[i])] -= presence + frequency * count;
      i = j;
    }
  }

  for (const auto& [token, bias] : params_.logit_bias) logits[size_t(token)] += bias;
}

void Sampler::apply_mask(std::span<float> logits, const uint32_t* allowed_mask) const {
  if (allowed_mask == nullptr) return;
  const size_t vocab = logits.size();
  const size_t n_words = (vocab + 31) / 32;
  for (size_t w = 0; w < n_words; ++w) {
    uint32_t banned = ~allowed_mask[w];
    if (w == n_words - 1 && vocab % 32 != 0) banned &= (uint32_t(1) << (vocab % 32)) - 1;  // bits past vocab
    while (banned != 0) {
      const int bit = __builtin_ctz(banned);
      banned &= banned - 1;
      logits[w * 32 + size_t(bit)] = kNegInf;
    }
  }
}

Sampler::Result Sampler::sample(const SamplerRow& row) { return sample_or_verify(row, -1, nullptr); }

Sampler::Verdict Sampler::verify_draft(const SamplerRow& row, int32_t draft, std::span<const float> draft_probs) {
  BRIOCHE_CHECK(draft >= 0 && draft < vocab_size_, "Sampler::verify_draft: expected a draft token in [0, ", vocab_size_,
                "), got ", draft);
  BRIOCHE_CHECK(draft_probs.empty() || draft_probs.size() == size_t(vocab_size_),
                "Sampler::verify_draft: expected draft probabilities over the ", vocab_size_, "-token vocabulary, got ",
                draft_probs.size());
  Verdict verdict;
  verdict.result = sample_or_verify(row, draft, &verdict.accepted, draft_probs);
  return verdict;
}

Sampler::Result Sampler::sample_or_verify(const SamplerRow& row, int32_t draft, bool* accepted,
                                          std::span<const float> draft_probs) {
  std::span<float> logits = row.logits;
  BRIOCHE_CHECK(logits.size() == size_t(vocab_size_), "Sampler: expected a logits row of ", vocab_size_,
                " entries (vocab), got ", logits.size());
  // NaN / +inf are caught after the penalties (which keep them NaN / +inf),
  // by the one max pass each path makes anyway.

  Result result;
  const bool want_logprobs = params_.logprobs || params_.top_logprobs > 0;
  double raw_log_z = 0.0;
  if (want_logprobs) {
    raw_log_z = log_softmax_normalizer(logits);
    result.top = top_logprobs(logits, params_.top_logprobs, raw_log_z);
    scratch().raw_logits.assign(logits.begin(), logits.end());
  }

  apply_penalties(logits, row.prompt, row.output);
  apply_mask(logits, row.allowed_mask);

  if (is_greedy()) {
    // Plain argmax; the first maximum wins (as torch.argmax).
    const float max_logit = checked_max(logits);
    BRIOCHE_CHECK(max_logit != kNegInf, "Sampler: no token is allowed (grammar mask and logit bias exclude all ",
                  vocab_size_, ")");
    result.token = int32_t(std::find(logits.begin(), logits.end(), max_logit) - logits.begin());
    if (accepted) *accepted = result.token == draft;
  } else {
    result.token = sample_truncated(logits, draft, accepted, draft_probs);
  }

  result.logprob = want_logprobs ? float(double(scratch().raw_logits[size_t(result.token)]) - raw_log_z)
                                 : std::numeric_limits<float>::quiet_NaN();
  return result;
}

int32_t Sampler::sample_truncated(std::span<float> logits, int32_t draft, bool* accepted,
                                  std::span<const float> draft_probs) {
  Scratch& s = scratch();
  const size_t vocab = logits.size();
  const float temperature = params_.temperature;

  divide_all(logits, temperature);
  const float max_logit = checked_max(logits);
  BRIOCHE_CHECK(max_logit != kNegInf, "Sampler: no token is allowed (grammar mask and logit bias exclude all ",
                vocab_size_, ")");

  // Top-k: the k-th largest value, ties included.
  // Min-p: p / p_max = exp(l - max) >= min_p  <=>  l >= max + log(min_p).
  const float min_p_bound = params_.min_p > 0.0f ? max_logit + std::log(params_.min_p) : kNegInf;
  const bool use_top_k = params_.top_k > 0 && size_t(params_.top_k) < vocab;
  const bool use_top_p = params_.top_p < 1.0f;

  // Weights of the candidates: every finite token when top-p is on (it needs
  // the mass of the whole top-k distribution), else only those min-p keeps.
  weigh_tokens(logits, max_logit, use_top_p ? kNegInf : min_p_bound, s.weight, s.block_mass);

  // Top-k: the k-th largest value, ties included.
  float top_k_bound = kNegInf;
  if (use_top_k) {
    top_k_bound = kth_largest(logits, s.weight, size_t(params_.top_k), s.values);
    // Top-p then works on the top-k distribution.
    if (use_top_p && top_k_bound != kNegInf) drop_below(logits, top_k_bound, s.weight, s.block_mass);
  }

  float top_p_bound = kNegInf;
  if (use_top_p) {
    double candidate_mass = 0.0;
    for (const double m : s.block_mass) candidate_mass += m;
    const double target = double(params_.top_p) * candidate_mass;
    // Most of a vocabulary lies far below the nucleus: sort only the tokens
    // above a weight level that holds the cut (nucleus_threshold), and
    // everything only if that selection ends without a cut.
    // One pass gives both the level to look above and how many tokens have weight.
    const WeightLevels levels = weight_levels(s.weight);
    const size_t with_weight = levels.count[kWeightLevels - 1];
    std::optional<float> bound =
        nucleus_bound(logits, s.weight, target, nucleus_threshold(levels, target), with_weight, s.order);
    if (!bound) {
      bound = nucleus_bound(logits, s.weight, target, std::numeric_limits<float>::denorm_min(), with_weight, s.order);
    }
    top_p_bound = *bound;
  }

  // Kept tokens: l >= bound; the others leave with l = -inf and weight 0.
  const float bound = std::max({top_k_bound, top_p_bound, min_p_bound});
  // Without truncation the weights and logits are already final.
  if (bound != kNegInf) drop_below(logits, bound, s.weight, s.block_mass);
  if (draft < 0) return draw_token(s.weight, s.block_mass, rng_.next_unit());
  if (!draft_probs.empty()) return verify_against(logits, draft, draft_probs, accepted);

  // Rejection rule for a point-mass proposal q = [draft]: accept with
  // min(1, p(draft) / q(draft)) = p(draft); otherwise draw from
  // max(0, p - q) normalised, which is p without the draft, renormalised.
  // P(token = t) = p(d) [t = d] + (1 - p(d)) p(t) / (1 - p(d)) [t != d] = p(t).
  double total = 0.0;
  for (const double m : s.block_mass) total += m;
  const double p_draft = double(s.weight[size_t(draft)]) / total;
  if (rng_.next_unit() < p_draft) {
    *accepted = true;
    return draft;
  }
  *accepted = false;
  s.block_mass[size_t(draft) / kMassBlock] -= double(s.weight[size_t(draft)]);
  s.weight[size_t(draft)] = 0.0f;
  logits[size_t(draft)] = kNegInf;
  const int32_t token = draw_token(s.weight, s.block_mass, rng_.next_unit());
  // Nothing left besides the draft (p(draft) rounded below 1 for a lone
  // kept token): the draft is the only possible outcome.
  if (token < 0) {
    *accepted = true;
    return draft;
  }
  return token;
}

// The rejection rule for a draft drawn from q (a draft model): with p the
// processed distribution in scratch weights (sum = block masses), accept
// with min(1, p(d) / q(d)); else draw from (p - q)+ renormalised
// (Sampler::verify_draft gives the proof that the result follows p).
int32_t Sampler::verify_against(std::span<float> logits, int32_t draft, std::span<const float> q, bool* accepted) {
  Scratch& s = scratch();
  double total = 0.0;
  for (const double m : s.block_mass) total += m;
  const double p_draft = double(s.weight[size_t(draft)]) / total;
  const double q_draft = double(q[size_t(draft)]);
  const double u = rng_.next_unit();
  if (q_draft <= 0.0 ? p_draft > 0.0 : u * q_draft < p_draft) {
    *accepted = true;
    return draft;
  }
  *accepted = false;
  // Residual weights (p - q)+ in the weight scale: w - q * total.
  std::fill(s.block_mass.begin(), s.block_mass.end(), 0.0);
  for (size_t t = 0; t < s.weight.size(); ++t) {
    const double r = double(s.weight[t]) - double(q[t]) * total;
    s.weight[t] = r > 0.0 ? float(r) : 0.0f;
    if (s.weight[t] == 0.0f) logits[t] = kNegInf;
    s.block_mass[t / kMassBlock] += double(s.weight[t]);
  }
  const int32_t token = draw_token(s.weight, s.block_mass, rng_.next_unit());
  // p <= q everywhere (up to rounding) leaves no residual: then p = q and
  // the draft would have been accepted with probability 1.
  if (token < 0) {
    *accepted = true;
    return draft;
  }
  return token;
}

}  // namespace brioche::engine
