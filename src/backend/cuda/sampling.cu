// Device sampling (sampling.h): one CTA of 1024 threads per row.
//
// Every threshold of engine/sampler.h is found without sorting:
//   * top-k bound = the k-th largest processed logit: radix select over the
//     floats' order-preserving 32-bit keys, 8 bits per pass (4 passes of a
//     256-bin histogram, each pass only over the keys still matching the
//     chosen prefix);
//   * top-p bound: the host walks tokens best first and keeps each while the
//     mass before it is < target = top_p * candidate mass, then keeps ties of
//     the last one. That last kept value is the lowest candidate value v with
//     G(v) < target, G(v) = mass of candidates strictly above v. The same
//     radix passes with a mass histogram find it: at each digit, the lowest
//     non-empty bin whose mass above is < the remaining target;
//   * top_logprobs: the n-th largest raw key by radix select, then among the
//     tokens equal to it the lowest ids (a second select over ~id);
//   * the draw: per-warp segment sums of the kept weights in id order, then
//     one warp walks its segment with a warp prefix sum.
// Histogram adds are warp-aggregated (lanes with the same bin add once), so
// peaked distributions do not serialize on one shared-memory address.
#include <algorithm>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstring>
#include <mutex>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/runtime.h"
#include "backend/cuda/sampling.h"
#include "core/error.h"

namespace brioche::cuda {

namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr unsigned kFull = 0xffffffffu;

// Unsigned order = float order (NaN excluded): negatives reversed, positives
// above them.
__device__ __forceinline__ uint32_t order_key(float v) {
  const uint32_t bits = __float_as_uint(v);
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

__device__ __forceinline__ float key_value(uint32_t key) {
  return __uint_as_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}

// The host's weight of a kept token: expf(l - max) as a float. exp in double
// rounded to float is the correctly rounded expf except in rare double-rounding cases.
__device__ __forceinline__ float token_weight(float l, float max_logit) {
  return float(exp(double(l - max_logit)));
}

struct Shared {
  int count[256];
  double mass[256];
  float reduce_f[kWarps];
  int reduce_i[kWarps];
  double reduce_d[kWarps];
  uint32_t chosen_bin;
  int rest_k;
  double rest_target;
  int n_top;
  int top_tokens[kMaxDeviceTopLogprobs];
  double segment_mass[kWarps];
  int segment_last[kWarps];
};

template <class T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(kFull, v, off);
  return v;
}

template <class T>
__device__ __forceinline__ T warp_inclusive_scan(T v) {
  const int lane = threadIdx.x & 31;
  for (int off = 1; off < 32; off <<= 1) {
    const T other = __shfl_up_sync(kFull, v, off);
    if (lane >= off) v += other;
  }
  return v;
}

// Block reductions; every thread gets the result (warp partials combined in
// warp order by every thread, so all threads agree bit for bit).
__device__ float block_max(float v, Shared& s) {
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(kFull, v, off));
  __syncthreads();
  if ((threadIdx.x & 31) == 0) s.reduce_f[threadIdx.x / 32] = v;
  __syncthreads();
  v = s.reduce_f[0];
  for (int w = 1; w < kWarps; ++w) v = fmaxf(v, s.reduce_f[w]);
  return v;
}

__device__ int block_min(int v, Shared& s) {
  for (int off = 16; off > 0; off >>= 1) v = min(v, __shfl_xor_sync(kFull, v, off));
  __syncthreads();
  if ((threadIdx.x & 31) == 0) s.reduce_i[threadIdx.x / 32] = v;
  __syncthreads();
  v = s.reduce_i[0];
  for (int w = 1; w < kWarps; ++w) v = min(v, s.reduce_i[w]);
  return v;
}

__device__ int block_sum(int v, Shared& s) {
  v = warp_sum(v);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) s.reduce_i[threadIdx.x / 32] = v;
  __syncthreads();
  v = 0;
  for (int w = 0; w < kWarps; ++w) v += s.reduce_i[w];
  return v;
}

__device__ double block_sum(double v, Shared& s) {
  v = warp_sum(v);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) s.reduce_d[threadIdx.x / 32] = v;
  __syncthreads();
  v = 0.0;
  for (int w = 0; w < kWarps; ++w) v += s.reduce_d[w];
  return v;
}

// (largest value, lowest index among equal values) over the block.
__device__ void block_argmax(float& v, int& index, Shared& s) {
  for (int off = 16; off > 0; off >>= 1) {
    const float ov = __shfl_xor_sync(kFull, v, off);
    const int oi = __shfl_xor_sync(kFull, index, off);
    if (ov > v || (ov == v && oi < index)) { v = ov; index = oi; }
  }
  __syncthreads();
  if ((threadIdx.x & 31) == 0) { s.reduce_f[threadIdx.x / 32] = v; s.reduce_i[threadIdx.x / 32] = index; }
  __syncthreads();
  v = s.reduce_f[0];
  index = s.reduce_i[0];
  for (int w = 1; w < kWarps; ++w) {
    if (s.reduce_f[w] > v || (s.reduce_f[w] == v && s.reduce_i[w] < index)) { v = s.reduce_f[w]; index = s.reduce_i[w]; }
  }
}

// Radix select over the keys of the in-play elements i in [0, n):
// `in_play(i, key)` returns whether element i takes part and sets its key;
// `weight_of(i)` (kByMass) is asked only for elements still matching the prefix.
//   !kByMass: the key of the k-th largest (1-based; k <= number in play).
//   kByMass:  the lowest key v in play whose mass strictly above v is < target (> 0).
template <bool kByMass, class InPlay, class WeightOf>
__device__ uint32_t radix_select(int n, InPlay in_play, WeightOf weight_of, int k, double target, Shared& s) {
  const int lane = threadIdx.x & 31;
  uint32_t prefix = 0, prefix_mask = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += kThreads) {
      s.count[b] = 0;
      if (kByMass) s.mass[b] = 0.0;
    }
    __syncthreads();
    for (int base = threadIdx.x - lane; base < n; base += kThreads) {
      const int i = base + lane;
      uint32_t key = 0;
      bool pending = i < n && in_play(i, key) && (key & prefix_mask) == prefix;
      const float weight = kByMass && pending ? weight_of(i) : 0.0f;
      const uint32_t bin = (key >> shift) & 0xffu;
      unsigned todo = __ballot_sync(kFull, pending);
      while (todo != 0) {  // one add per distinct bin among the lanes
        const int leader = __ffs(todo) - 1;
        const uint32_t leader_bin = __shfl_sync(kFull, bin, leader);
        const bool mine = pending && bin == leader_bin;
        const unsigned group = __ballot_sync(kFull, mine);
        if (kByMass) {
          const double m = warp_sum(mine ? double(weight) : 0.0);
          if (lane == leader) atomicAdd(&s.mass[leader_bin], m);
        }
        if (lane == leader) atomicAdd(&s.count[leader_bin], __popc(group));
        if (mine) pending = false;
        todo &= ~group;
      }
    }
    __syncthreads();
    if (threadIdx.x < 32) {
      // Lane l looks at bins 255 - 8l - j, j = 0..7: descending over the warp.
      int lane_count = 0;
      double lane_mass = 0.0;
      for (int j = 0; j < 8; ++j) {
        const int b = 255 - 8 * lane - j;
        lane_count += s.count[b];
        if (kByMass) lane_mass += s.mass[b];
      }
      bool found = false;
      uint32_t found_bin = 0;
      if (!kByMass) {
        int above = warp_inclusive_scan(lane_count) - lane_count;
        int rest = 0;
        for (int j = 0; j < 8; ++j) {
          const int b = 255 - 8 * lane - j;
          const int c = s.count[b];
          if (!found && above < k && k <= above + c) {
            found = true;
            found_bin = uint32_t(b);
            rest = k - above;
          }
          above += c;
        }
        if (found) {
          s.chosen_bin = found_bin;
          s.rest_k = rest;
        }
      } else {
        double above = warp_inclusive_scan(lane_mass) - lane_mass;
        double rest = 0.0;
        bool any_nonempty = false;
        uint32_t top_bin = 0;
        for (int j = 0; j < 8; ++j) {
          const int b = 255 - 8 * lane - j;
          if (s.count[b] > 0) {
            if (!any_nonempty) top_bin = uint32_t(b);
            any_nonempty = true;
            if (above < target) {  // keep the lowest such bin of this lane
              found = true;
              found_bin = uint32_t(b);
              rest = target - above;
            }
          }
          above += s.mass[b];
        }
        const unsigned found_lanes = __ballot_sync(kFull, found);
        if (found_lanes != 0) {
          if (lane == 31 - __clz(found_lanes)) {  // the lowest bin overall
            s.chosen_bin = found_bin;
            s.rest_target = rest;
          }
        } else {
          // Rounding left no bin below the target: the highest one.
          const unsigned nonempty = __ballot_sync(kFull, any_nonempty);
          if (nonempty != 0 && lane == __ffs(nonempty) - 1) {
            s.chosen_bin = top_bin;
            s.rest_target = 0.0;
          }
        }
      }
    }
    __syncthreads();
    prefix |= s.chosen_bin << shift;
    prefix_mask |= 0xffu << shift;
    if (!kByMass) k = s.rest_k;
    else target = s.rest_target;
    __syncthreads();
  }
  return prefix;
}

// For the count-only selects.
struct NoWeight {
  __device__ float operator()(int) const { return 0.0f; }
};

__device__ __forceinline__ bool allowed(const uint32_t* mask, int i) {
  return mask == nullptr || ((mask[i >> 5] >> (i & 31)) & 1u) != 0;
}

// The n most likely raw tokens into s.top_tokens (unordered), ties to the
// lower ids; returns how many.
__device__ int top_raw_tokens(const float* raw, int vocab, int n, Shared& s) {
  const uint32_t kth = radix_select<false>(
      vocab, [&](int i, uint32_t& key) { key = order_key(raw[i]); return true; }, NoWeight{}, n, 0.0, s);
  int above = 0;
  for (int i = threadIdx.x; i < vocab; i += kThreads) above += order_key(raw[i]) > kth ? 1 : 0;
  above = block_sum(above, s);
  const int ties_needed = n - above;  // >= 1
  const uint32_t id_key = radix_select<false>(
      vocab,
      [&](int i, uint32_t& key) {
        if (order_key(raw[i]) != kth) return false;
        key = ~uint32_t(i);  // largest key = lowest id
        return true;
      },
      NoWeight{}, ties_needed, 0.0, s);
  const int last_tie = int(~id_key);
  if (threadIdx.x == 0) s.n_top = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const uint32_t key = order_key(raw[i]);
    if (key > kth || (key == kth && i <= last_tie)) s.top_tokens[atomicAdd(&s.n_top, 1)] = i;
  }
  __syncthreads();
  return s.n_top;
}

__global__ void __launch_bounds__(kThreads) sample_kernel(const float* logits, int64_t stride, int vocab,
                                                          const SampleRowParams* rows,        // [n_rows]
                                                          const SamplePenaltyEntry* entries,  // [n_entries]
                                                          const float* biases,                // [n_biases]
                                                          const uint32_t* masks,  // [n_masks, mask_words]
                                                          int mask_words,
                                                          float* scratch,          // [n_rows, vocab]
                                                          SampleResult* results) { // [n_rows]
  __shared__ Shared s;
  const SampleRowParams p = rows[blockIdx.x];
  SampleResult* out = results + blockIdx.x;
  const float kInf = INFINITY;
  if (p.skip) {
    if (threadIdx.x == 0) {
      out->token = -1;
      out->status = SampleStatus::Ok;
      out->n_top = 0;
    }
    return;
  }
  const float* raw = logits + int64_t(p.logit_row) * stride;  // [vocab]
  const uint32_t* mask = p.mask_index >= 0 ? masks + int64_t(p.mask_index) * mask_words : nullptr;
  const bool greedy = p.greedy != 0;
  const bool has_entries = p.entry_end > p.entry_begin;
  const bool write_processed = has_entries || mask != nullptr || (!greedy && p.temperature != 1.0f);
  float* processed = scratch + int64_t(blockIdx.x) * vocab;  // [vocab]
  const float* proc = write_processed ? processed : raw;

  // 1. Raw row: NaN/+inf check, max; processed logits (mask, temperature)
  //    for every token, penalties overwrite their tokens below.
  float raw_max = -kInf;
  int bad = INT_MAX;
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const float l = raw[i];
    if (!(l < kInf)) bad = min(bad, i);
    raw_max = fmaxf(raw_max, l);
    if (write_processed) processed[i] = !allowed(mask, i) ? -kInf : greedy ? l : l / p.temperature;
  }
  bad = block_min(bad, s);
  if (bad != INT_MAX) {
    if (threadIdx.x == 0) {
      out->status = SampleStatus::BadLogit;
      out->bad_index = bad;
      out->bad_value = raw[bad];
      out->token = -1;
      out->n_top = 0;
    }
    return;
  }
  raw_max = block_max(raw_max, s);

  // 2. Raw logprobs: log Z = max + log sum exp(l - max), in double.
  const bool want_logprobs = p.want_logprobs != 0 || p.top_logprobs > 0;
  double log_z = 0.0;
  if (want_logprobs) {
    if (raw_max == -kInf) {
      log_z = -double(kInf);
    } else {
      double sum = 0.0;
      for (int i = threadIdx.x; i < vocab; i += kThreads) sum += exp(double(raw[i]) - double(raw_max));
      log_z = double(raw_max) + log(block_sum(sum, s));
    }
  }
  int n_top = 0;
  if (p.top_logprobs > 0) n_top = top_raw_tokens(raw, vocab, min(p.top_logprobs, vocab), s);

  // 3. Penalties and bias, each distinct token once (host order: repetition,
  //    presence/frequency, bias), then its mask bit and temperature.
  if (has_entries) {
    for (int e = p.entry_begin + int(threadIdx.x); e < p.entry_end; e += kThreads) {
      const SamplePenaltyEntry entry = entries[e];
      float l = raw[entry.token];
      if (entry.repeated) l = l > 0.0f ? l / p.repetition_penalty : l * p.repetition_penalty;
      // The host's x86-64-v3 build contracts presence + frequency * count into one FMA.
      if (entry.output_count > 0.0f) l -= __fmaf_rn(p.frequency_penalty, entry.output_count, p.presence_penalty);
      for (int b = entry.bias_begin; b < entry.bias_end; ++b) l += biases[b];
      processed[entry.token] = !allowed(mask, entry.token) ? -kInf : greedy ? l : l / p.temperature;
    }
    __syncthreads();
  }

  // 4. Max of the processed logits (and its first index, the greedy pick).
  float best = -kInf;
  int best_index = INT_MAX;
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const float q = proc[i];
    if (q > best) {
      best = q;
      best_index = i;
    }
  }
  block_argmax(best, best_index, s);
  if (best == -kInf) {
    if (threadIdx.x == 0) {
      out->status = SampleStatus::NothingAllowed;
      out->token = -1;
      out->n_top = 0;
    }
    return;
  }
  const float max_logit = best;

  int token = best_index;
  if (!greedy) {
    // 5. Bounds: top-k, min-p, top-p (over the top-k candidates).
    float top_k_bound = -kInf;
    if (p.top_k > 0 && p.top_k < vocab) {
      top_k_bound = key_value(radix_select<false>(
          vocab, [&](int i, uint32_t& key) { key = order_key(proc[i]); return true; }, NoWeight{}, p.top_k, 0.0, s));
    }
    const float min_p_bound = p.use_min_p ? max_logit + p.log_min_p : -kInf;
    const bool use_top_p = p.top_p < 1.0f;
    const float candidate_bound = use_top_p ? top_k_bound : fmaxf(top_k_bound, min_p_bound);
    float top_p_bound = -kInf;
    if (use_top_p) {
      double mass = 0.0;
      for (int i = threadIdx.x; i < vocab; i += kThreads) {
        const float q = proc[i];
        if (q >= candidate_bound && q != -kInf) mass += double(token_weight(q, max_logit));
      }
      const double target = double(p.top_p) * block_sum(mass, s);
      if (target <= 0.0) {
        top_p_bound = max_logit;  // the first token is always kept
      } else {
        top_p_bound = key_value(radix_select<true>(
            vocab,
            [&](int i, uint32_t& key) {
              const float q = proc[i];
              if (!(q >= candidate_bound && q != -kInf)) return false;
              key = order_key(q);
              return true;
            },
            [&](int i) { return token_weight(proc[i], max_logit); }, 0, target, s));
      }
    }
    const float bound = fmaxf(fmaxf(top_k_bound, top_p_bound), min_p_bound);

    // 6. Inverse CDF over kept tokens in ascending id order: warp w owns
    //    ids [w * segment, (w + 1) * segment).
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const int segment = ((vocab + kWarps - 1) / kWarps + 31) / 32 * 32;
    const int seg_begin = min(vocab, warp * segment), seg_end = min(vocab, seg_begin + segment);
    double seg_mass = 0.0;
    int seg_last = -1;
    for (int i = seg_begin + lane; i < seg_end; i += 32) {
      const float q = proc[i];
      if (q >= bound && q != -kInf) {
        seg_mass += double(token_weight(q, max_logit));
        seg_last = i;
      }
    }
    seg_mass = warp_sum(seg_mass);
    for (int off = 16; off > 0; off >>= 1) seg_last = max(seg_last, __shfl_xor_sync(kFull, seg_last, off));
    if (lane == 0) {
      s.segment_mass[warp] = seg_mass;
      s.segment_last[warp] = seg_last;
    }
    __syncthreads();
    double total = 0.0;
    int last_kept = -1;
    for (int w = 0; w < kWarps; ++w) {
      total += s.segment_mass[w];
      last_kept = max(last_kept, s.segment_last[w]);
    }
    const double target = p.u * total;
    double before = 0.0;  // mass of the segments before the chosen one
    int chosen = -1;
    for (int w = 0; w < kWarps; ++w) {
      if (s.segment_mass[w] > 0.0 && before + s.segment_mass[w] > target) {
        chosen = w;
        break;
      }
      before += s.segment_mass[w];
    }
    token = last_kept;  // u * mass rounded up to the full mass
    if (chosen >= 0) {
      if (warp == chosen) {
        double cumulative = before;
        const int begin = min(vocab, chosen * segment), end = min(vocab, begin + segment);
        int picked = s.segment_last[chosen];
        for (int base = begin; base < end; base += 32) {
          const int i = base + lane;
          const float q = i < end ? proc[i] : -kInf;
          const bool kept = q >= bound && q != -kInf;
          const double w = kept ? double(token_weight(q, max_logit)) : 0.0;
          const double running = cumulative + warp_inclusive_scan(w);
          const unsigned hits = __ballot_sync(kFull, kept && running > target);
          if (hits != 0) {
            picked = base + __ffs(hits) - 1;
            break;
          }
          cumulative = __shfl_sync(kFull, running, 31);
        }
        if (lane == 0) s.rest_k = picked;
      }
      __syncthreads();
      token = s.rest_k;
    }
  }

  if (threadIdx.x == 0) {
    out->status = SampleStatus::Ok;
    out->token = token;
    out->logprob = want_logprobs ? float(double(raw[token]) - log_z) : NAN;
    // Best first, ties to the lower id (n_top <= 32: insertion sort).
    for (int a = 1; a < n_top; ++a) {
      const int id = s.top_tokens[a];
      int b = a;
      while (b > 0) {
        const int other = s.top_tokens[b - 1];
        if (raw[other] > raw[id] || (raw[other] == raw[id] && other < id)) break;
        s.top_tokens[b] = other;
        --b;
      }
      s.top_tokens[b] = id;
    }
    out->n_top = n_top;
    for (int a = 0; a < n_top; ++a) {
      out->top_tokens[a] = s.top_tokens[a];
      out->top_logprobs[a] = float(double(raw[s.top_tokens[a]]) - log_z);
    }
  }
}

size_t align_up(size_t bytes) { return (bytes + 255) & ~size_t(255); }

// Pinned host staging for the upload and the results; reused by every call
// (each call waits for its results, so nothing is in flight when it starts).
struct Staging {
  std::mutex mutex;
  void* upload = nullptr;
  size_t upload_capacity = 0;
  void* download = nullptr;
  size_t download_capacity = 0;

  static void grow(void*& buffer, size_t& capacity, size_t bytes) {
    if (capacity >= bytes) return;
    if (buffer != nullptr) CUDA_CHECK(cudaFreeHost(buffer));
    capacity = std::max<size_t>(bytes, 64 << 10);
    CUDA_CHECK(cudaMallocHost(&buffer, capacity));
  }
};

Staging& staging() {
  static Staging s;
  return s;
}

}  // namespace

void sample_rows(const SampleRowsArgs& a) {
  const SampleBatch& b = *a.batch;
  const size_t n_rows = b.rows.size();
  BRIOCHE_CHECK(a.results.size() == n_rows, "cuda::sample_rows: expected ", n_rows, " result slots, got ",
                a.results.size());
  if (n_rows == 0) return;
  BRIOCHE_CHECK(b.vocab > 0 && a.logits_stride >= b.vocab, "cuda::sample_rows: expected vocab > 0 and a row stride >= vocab, got vocab ",
                b.vocab, " and stride ", a.logits_stride);
  const int mask_words = (b.vocab + 31) / 32;
  BRIOCHE_CHECK(b.masks.size() % size_t(mask_words) == 0, "cuda::sample_rows: masks hold ", b.masks.size(),
                " words, expected a multiple of ", mask_words, " (ceil(vocab / 32))");
  for (const SampleRowParams& row : b.rows) {
    BRIOCHE_CHECK(row.top_logprobs <= kMaxDeviceTopLogprobs, "cuda::sample_rows: top_logprobs ", row.top_logprobs,
                  " exceeds the device limit ", kMaxDeviceTopLogprobs);
    BRIOCHE_CHECK(row.entry_begin >= 0 && row.entry_end <= int32_t(b.entries.size()) && row.entry_begin <= row.entry_end,
                  "cuda::sample_rows: entry range [", row.entry_begin, ", ", row.entry_end, ") outside ", b.entries.size());
    BRIOCHE_CHECK(row.mask_index < int32_t(b.masks.size() / size_t(mask_words)), "cuda::sample_rows: mask ",
                  row.mask_index, " of ", b.masks.size() / size_t(mask_words));
  }

  // One upload: rows | entries | biases | masks.
  const size_t rows_bytes = align_up(n_rows * sizeof(SampleRowParams));
  const size_t entries_bytes = align_up(b.entries.size() * sizeof(SamplePenaltyEntry));
  const size_t biases_bytes = align_up(b.biases.size() * sizeof(float));
  const size_t masks_bytes = align_up(b.masks.size() * sizeof(uint32_t));
  const size_t upload_bytes = rows_bytes + entries_bytes + biases_bytes + masks_bytes;
  const size_t results_bytes = n_rows * sizeof(SampleResult);

  Staging& st = staging();
  std::lock_guard lock(st.mutex);
  Staging::grow(st.upload, st.upload_capacity, upload_bytes);
  Staging::grow(st.download, st.download_capacity, results_bytes);
  char* host = static_cast<char*>(st.upload);
  std::memcpy(host, b.rows.data(), n_rows * sizeof(SampleRowParams));
  if (!b.entries.empty()) std::memcpy(host + rows_bytes, b.entries.data(), b.entries.size() * sizeof(SamplePenaltyEntry));
  if (!b.biases.empty()) std::memcpy(host + rows_bytes + entries_bytes, b.biases.data(), b.biases.size() * sizeof(float));
  if (!b.masks.empty())
    std::memcpy(host + rows_bytes + entries_bytes + biases_bytes, b.masks.data(), b.masks.size() * sizeof(uint32_t));

  cudaStream_t stream = detail::current_stream();
  std::shared_ptr<void> device_upload = allocate(upload_bytes);
  std::shared_ptr<void> device_results = allocate(results_bytes);
  std::shared_ptr<void> scratch = allocate(n_rows * size_t(b.vocab) * sizeof(float));
  char* dev = static_cast<char*>(device_upload.get());
  CUDA_CHECK(cudaMemcpyAsync(dev, host, upload_bytes, cudaMemcpyHostToDevice, stream));
  sample_kernel<<<unsigned(n_rows), kThreads, 0, stream>>>(
      a.logits, a.logits_stride, b.vocab, reinterpret_cast<const SampleRowParams*>(dev),
      reinterpret_cast<const SamplePenaltyEntry*>(dev + rows_bytes),
      reinterpret_cast<const float*>(dev + rows_bytes + entries_bytes),
      reinterpret_cast<const uint32_t*>(dev + rows_bytes + entries_bytes + biases_bytes), mask_words,
      static_cast<float*>(scratch.get()), static_cast<SampleResult*>(device_results.get()));
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaMemcpyAsync(st.download, device_results.get(), results_bytes, cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  std::memcpy(a.results.data(), st.download, results_bytes);
}

}  // namespace brioche::cuda
