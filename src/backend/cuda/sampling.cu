// Device sampling (sampling.h): a row is sampled by a thread block cluster
// of 1, 2, 4 or 8 CTAs of 1024 threads, each CTA taking one slice of the
// vocabulary.
//
// Why a cluster: at batch 1 one CTA did every pass over the vocabulary on one
// SM of 132, its warps mostly waiting at barriers (SmolLM2's 49,152 logits,
// T 0.8 with top-k and top-p: 153 µs, ~0.12 ms of a 0.6 ms decode step).
// With 8 CTAs a pass costs an eighth, plus one cluster barrier. The launcher
// gives each row as many CTAs as let all the batch's clusters be resident at
// once (a CTA holds an SM's registers), so large batches keep one CTA a row.
//
// Values every CTA needs (maxima, sums, histogram bins) are published in
// each CTA's shared memory and read by every CTA of the cluster in rank
// order (distributed shared memory), so all threads of all CTAs compute the
// same bits and take the same branches.
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
//   * the draw: per-warp segment sums of the kept weights in id order (CTA
//     by CTA), then one warp of one CTA walks its segment with a warp prefix
//     sum.
// The radix selects of top-k, top-p and top_logprobs stop once at most
// kMaxCandidates tokens have keys from their prefix up (a top-k of 50 after
// 2 of 4 passes, a top-p of a peaked row after 1): those tokens, among which
// are all that can be kept (or listed), are gathered into rank 0, which
// finishes alone (sample_candidates; top_raw_tokens ranks them). Count
// histograms add once per bin among a warp's lanes (__match_any_sync); mass
// histograms are summed per warp, then over the warps in warp order, so
// peaked rows do not serialize on one address.
#include <cooperative_groups.h>

#include <algorithm>
#include <array>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstring>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/runtime.h"
#include "backend/cuda/sampling.h"
#include "core/error.h"

namespace brioche::cuda {

namespace {

namespace cg = cooperative_groups;

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxCtasPerRow = 8;                                         // the portable cluster size
constexpr size_t kWarpMassBytes = size_t(kWarps) * 256 * sizeof(double);  // radix_select's per-warp histograms
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
__device__ __forceinline__ float token_weight(float l, float max_logit) { return float(exp(double(l - max_logit))); }

// A token that can be kept, gathered into rank 0.
struct Candidate {
  float q;  // its processed logit (raw for top_logprobs)
  int id;
};
// Once at most this many tokens can be kept, rank 0 finishes the row alone
// (sample_candidates: O(n) per thread, n <= this).
constexpr int kMaxCandidates = 256;

// What a CTA publishes to its cluster: one reduced value of each kind
// (no member initializers: it lives in __shared__; braced initialization
// zeroes the members it leaves out).
struct CtaValue {
  float f;
  int i;
  double d;
};

struct Shared {
  // Published to the cluster, in two buffers: the one of the barrier's
  // parity (RowCtas::phase).
  int count[2][256];  // radix histograms
  double mass[2][256];
  CtaValue published[2];
  // This CTA's own.
  int row_count[256];  // the histograms summed over the row's CTAs
  double row_mass[256];
  float reduce_f[kWarps];
  int reduce_i[kWarps];
  double reduce_d[kWarps];
  uint32_t chosen_bin;
  int count_above, from_chosen;  // radix_select: in-play elements above the prefix, and from it up
  int rest_k;
  double rest_target;
  int n_top;  // rank 0: the gathered top tokens
  int top_tokens[kMaxDeviceTopLogprobs];
  int n_candidates;  // rank 0: the gathered candidates
  Candidate candidates[kMaxCandidates];
  Candidate by_id[kMaxCandidates];
  double weight[kMaxCandidates];
  double segment_mass[kWarps];
  int segment_last[kWarps];
};

// The CTAs of one row: CTA `rank` of `ctas` takes ids [begin, end) (empty
// for the last ranks of a small vocabulary). A buffer published at barrier
// j (written before it, read after it) is written again only after barrier
// j + 2, which every CTA reaches after its reads: so two buffers alternate
// by the parity of the barrier count, and each exchange costs one barrier.
struct RowCtas {
  cg::cluster_group cluster = cg::this_cluster();
  int rank = 0, ctas = 1, begin = 0, end = 0;
  int phase = 0;  // cluster barriers passed

  __device__ explicit RowCtas(int vocab) {
    rank = int(cluster.block_rank());
    ctas = int(cluster.num_blocks());
    const int slice = ((vocab + ctas - 1) / ctas + 31) / 32 * 32;
    begin = min(vocab, rank * slice);
    end = min(vocab, begin + slice);
  }
  __device__ int buffer() const { return phase & 1; }
  __device__ void sync() {
    cluster.sync();
    ++phase;
  }
  template <class T>
  __device__ T* of_rank(T* p, int r) const {
    return cluster.map_shared_rank(p, unsigned(r));
  }
  // `v` (the same in every thread of this CTA) combined over the row's CTAs
  // in rank order by fold(acc, other).
  template <class Fold>
  __device__ CtaValue combine(const CtaValue& v, Shared& s, Fold fold) {
    CtaValue* slot = &s.published[buffer()];
    if (threadIdx.x == 0) *slot = v;
    sync();
    CtaValue all = *of_rank(slot, 0);
    for (int r = 1; r < ctas; ++r) fold(all, *of_rank(slot, r));
    return all;
  }
  // Before a CTA leaves: no CTA reads its shared memory after this.
  __device__ void finish() {
    if (ctas > 1) cluster.sync();
  }
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

// The row's sums: each CTA's block sum, then the CTAs' in rank order.
__device__ int row_sum(int v, RowCtas& row, Shared& s) {
  return row.combine({.i = block_sum(v, s)}, s, [](CtaValue& a, const CtaValue& b) { a.i += b.i; }).i;
}

__device__ double row_sum(double v, RowCtas& row, Shared& s) {
  return row.combine({.d = block_sum(v, s)}, s, [](CtaValue& a, const CtaValue& b) { a.d += b.d; }).d;
}

// (largest value, lowest index among equal values).
__device__ __forceinline__ void keep_better(float& v, int& index, float ov, int oi) {
  if (ov > v || (ov == v && oi < index)) {
    v = ov;
    index = oi;
  }
}

// The CTA's (largest value, lowest index among equal values); every thread
// gets it.
__device__ void block_argmax(float& v, int& index, Shared& s) {
  for (int off = 16; off > 0; off >>= 1) {
    keep_better(v, index, __shfl_xor_sync(kFull, v, off), __shfl_xor_sync(kFull, index, off));
  }
  __syncthreads();
  if ((threadIdx.x & 31) == 0) {
    s.reduce_f[threadIdx.x / 32] = v;
    s.reduce_i[threadIdx.x / 32] = index;
  }
  __syncthreads();
  v = s.reduce_f[0];
  index = s.reduce_i[0];
  for (int w = 1; w < kWarps; ++w) keep_better(v, index, s.reduce_f[w], s.reduce_i[w]);
}

// The row's (largest value, lowest index among equal values).
__device__ void row_argmax(float& v, int& index, RowCtas& row, Shared& s) {
  block_argmax(v, index, s);
  const CtaValue all =
      row.combine({.f = v, .i = index}, s, [](CtaValue& a, const CtaValue& b) { keep_better(a.f, a.i, b.f, b.i); });
  v = all.f;
  index = all.i;
}

// A radix select's key, and how many in-play elements have keys from it up.
struct RadixCut {
  uint32_t key;
  int from_key;
};

// Radix select over the keys of the row's in-play elements: `in_play(i,
// key)` returns whether element i takes part and sets its key; `weight_of(i)`
// (kByMass) is asked only for elements still matching the prefix. Each CTA
// counts its slice; a thread per bin sums the bin over the CTAs, and warp 0
// of every CTA picks the bin (the same one in every CTA).
//   !kByMass: the key of the k-th largest (1-based; k <= number in play).
//   kByMass:  the lowest key v in play whose mass strictly above v is < target (> 0).
// With stop_at > 0 it returns early, after the first digit from whose
// prefix up at most stop_at elements remain: then `key` is that prefix (the
// rest of its bits 0) and the answer is among the elements from it up.
// A mass histogram is summed per warp first (`warp_mass`, kWarps × 256 in
// dynamic shared memory: plain adds, where one shared histogram took a
// compare-and-swap loop per double add, contended by every warp), then over
// the warps in warp order.
template <bool kByMass, class InPlay, class WeightOf>
__device__ RadixCut radix_select(RowCtas& row, InPlay in_play, WeightOf weight_of, int k, double target, Shared& s,
                                 double* warp_mass = nullptr, int stop_at = 0) {
  const int lane = threadIdx.x & 31;
  if (threadIdx.x == 0) s.count_above = 0;
  double* my_mass = kByMass ? warp_mass + (threadIdx.x / 32) * 256 : nullptr;
  uint32_t prefix = 0, prefix_mask = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    int* count = s.count[row.buffer()];
    double* mass = s.mass[row.buffer()];
    for (int b = threadIdx.x; b < 256; b += kThreads) count[b] = 0;
    if (kByMass)
      for (int b = lane; b < 256; b += 32) my_mass[b] = 0.0;
    __syncthreads();
    for (int base = row.begin + threadIdx.x - lane; base < row.end; base += kThreads) {
      const int i = base + lane;
      uint32_t key = 0;
      bool pending = i < row.end && in_play(i, key) && (key & prefix_mask) == prefix;
      const float weight = kByMass && pending ? weight_of(i) : 0.0f;
      const uint32_t bin = (key >> shift) & 0xffu;
      if constexpr (!kByMass) {
        // Lanes of one bin found in one instruction (the lanes not in play
        // share the value 256); the lowest adds the group's count.
        const unsigned group = __match_any_sync(kFull, pending ? bin : 256u);
        if (pending && lane == __ffs(group) - 1) atomicAdd(&count[bin], __popc(group));
        continue;
      }
      unsigned todo = __ballot_sync(kFull, pending);
      while (todo != 0) {  // one mass and count add per distinct bin among the lanes
        const int leader = __ffs(todo) - 1;
        const uint32_t leader_bin = __shfl_sync(kFull, bin, leader);
        const bool mine = pending && bin == leader_bin;
        const unsigned group = __ballot_sync(kFull, mine);
        const double m = warp_sum(mine ? double(weight) : 0.0);
        if (lane == leader) {
          my_mass[leader_bin] += m;
          atomicAdd(&count[leader_bin], __popc(group));
        }
        if (mine) pending = false;
        todo &= ~group;
      }
    }
    if constexpr (kByMass) {
      __syncthreads();
      for (int b = threadIdx.x; b < 256; b += kThreads) {
        double m = 0.0;
        for (int w = 0; w < kWarps; ++w) m += warp_mass[w * 256 + b];
        mass[b] = m;
      }
    }
    row.sync();  // every CTA's histogram is complete
    // The row's bins, a thread per bin: its CTAs' counts (and masses) read
    // at once, then summed in rank order.
    for (int b = threadIdx.x; b < 256; b += kThreads) {
      int total_count = 0;
      double total_mass = 0.0;
#pragma unroll
      for (int r = 0; r < kMaxCtasPerRow; ++r) {
        if (r >= row.ctas) break;
        total_count += row.of_rank(count, r)[b];
        if (kByMass) total_mass += row.of_rank(mass, r)[b];
      }
      s.row_count[b] = total_count;
      if (kByMass) s.row_mass[b] = total_mass;
    }
    __syncthreads();
    if (threadIdx.x < 32) {
      // Lane l looks at bins 255 - 8l - j, j = 0..7: descending over the warp.
      int bin_count[8];
      double bin_mass[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        bin_count[j] = s.row_count[255 - 8 * lane - j];
        bin_mass[j] = kByMass ? s.row_mass[255 - 8 * lane - j] : 0.0;
      }
      int lane_count = 0;
      double lane_mass = 0.0;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        lane_count += bin_count[j];
        if (kByMass) lane_mass += bin_mass[j];
      }
      bool found = false;
      uint32_t found_bin = 0;
      if (!kByMass) {
        int above = warp_inclusive_scan(lane_count) - lane_count;
        int rest = 0;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const int c = bin_count[j];
          if (!found && above < k && k <= above + c) {
            found = true;
            found_bin = uint32_t(255 - 8 * lane - j);
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
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const uint32_t b = uint32_t(255 - 8 * lane - j);
          if (bin_count[j] > 0) {
            if (!any_nonempty) top_bin = b;
            any_nonempty = true;
            if (above < target) {  // keep the lowest such bin of this lane
              found = true;
              found_bin = b;
              rest = target - above;
            }
          }
          above += bin_mass[j];
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
      // The elements in bins above the chosen one join those above the prefix.
      __syncwarp();
      const uint32_t chosen = s.chosen_bin;
      int higher = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) higher += uint32_t(255 - 8 * lane - j) > chosen ? bin_count[j] : 0;
      higher = warp_sum(higher);
      if (lane == 0) {
        s.count_above += higher;
        s.from_chosen = s.count_above + s.row_count[chosen];
      }
    }
    __syncthreads();
    prefix |= s.chosen_bin << shift;
    prefix_mask |= 0xffu << shift;
    if (!kByMass)
      k = s.rest_k;
    else
      target = s.rest_target;
    const int from_prefix = s.from_chosen;
    __syncthreads();
    if (shift == 0 || (stop_at > 0 && from_prefix <= stop_at)) return {prefix, from_prefix};
  }
  return {prefix, 0};  // (not reached)
}

// For the count-only selects.
struct NoWeight {
  __device__ float operator()(int) const { return 0.0f; }
};

__device__ __forceinline__ bool allowed(const uint32_t* mask, int i) {
  return mask == nullptr || ((mask[i >> 5] >> (i & 31)) & 1u) != 0;
}

// The tokens with values[i] >= bound and a key from `floor` up (finite ones
// only, or -inf too), gathered into rank 0's s.candidates (unordered);
// returns their number, in every CTA. (Callers know there are at most
// kMaxCandidates: radix_select's from_key.)
__device__ int gather_candidates(const float* values, float bound, uint32_t floor, bool finite_only, RowCtas& row,
                                 Shared& s) {
  if (row.rank == 0 && threadIdx.x == 0) s.n_candidates = 0;
  row.sync();
  int* n = row.of_rank(&s.n_candidates, 0);
  Candidate* candidates = row.of_rank(s.candidates, 0);
  for (int i = row.begin + threadIdx.x; i < row.end; i += kThreads) {
    const float v = values[i];
    if (v >= bound && !(finite_only && v == -INFINITY) && order_key(v) >= floor) {
      const int slot = atomicAdd(n, 1);
      if (slot < kMaxCandidates) candidates[slot] = {v, i};
    }
  }
  row.sync();
  return min(*n, kMaxCandidates);
}

// The n most likely raw tokens gathered into rank 0's s.top_tokens, ties to
// the lower ids; returns how many (on rank 0). When the select stops with
// few tokens from its prefix up, rank 0 ranks those (best first) alone.
__device__ int top_raw_tokens(const float* raw, int n, RowCtas& row, Shared& s) {
  const RadixCut cut = radix_select<false>(
      row,
      [&](int i, uint32_t& key) {
        key = order_key(raw[i]);
        return true;
      },
      NoWeight{}, n, 0.0, s, nullptr, kMaxCandidates);
  if (cut.from_key <= kMaxCandidates) {
    const int n_candidates = gather_candidates(raw, -INFINITY, cut.key, false, row, s);
    if (row.rank == 0 && threadIdx.x < n_candidates) {
      // Its place: the candidates before it (larger, or equal with a lower id).
      const Candidate mine = s.candidates[threadIdx.x];
      int place = 0;
      for (int j = 0; j < n_candidates; ++j) {
        const Candidate other = s.candidates[j];
        place += other.q > mine.q || (other.q == mine.q && other.id < mine.id) ? 1 : 0;
      }
      if (place < n) s.top_tokens[place] = mine.id;
    }
    __syncthreads();
    return n;
  }
  const uint32_t kth = cut.key;  // (the select ran to its last digit)
  int above = 0;
  for (int i = row.begin + threadIdx.x; i < row.end; i += kThreads) above += order_key(raw[i]) > kth ? 1 : 0;
  above = row_sum(above, row, s);
  const int ties_needed = n - above;  // >= 1
  const uint32_t id_key = radix_select<false>(
                              row,
                              [&](int i, uint32_t& key) {
                                if (order_key(raw[i]) != kth) return false;
                                key = ~uint32_t(i);  // largest key = lowest id
                                return true;
                              },
                              NoWeight{}, ties_needed, 0.0, s)
                              .key;
  const int last_tie = int(~id_key);
  if (row.rank == 0 && threadIdx.x == 0) s.n_top = 0;
  row.sync();
  int* n_top = row.of_rank(&s.n_top, 0);
  int* top_tokens = row.of_rank(s.top_tokens, 0);
  for (int i = row.begin + threadIdx.x; i < row.end; i += kThreads) {
    const uint32_t key = order_key(raw[i]);
    if (key > kth || (key == kth && i <= last_tie)) top_tokens[atomicAdd(n_top, 1)] = i;
  }
  row.sync();
  return s.n_top;
}

// The inverse-CDF draw over the tokens kept by `bound`, in ascending id
// order: CTA by CTA, and in a CTA warp w owns ids [begin + w·segment, …).
// Returns the drawn id (the same in every CTA).
__device__ int draw(const float* proc, float bound, float max_logit, double u, RowCtas& row, Shared& s) {
  const float kInf = INFINITY;
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int segment = ((row.end - row.begin + kWarps - 1) / kWarps + 31) / 32 * 32;
  const int seg_begin = min(row.end, row.begin + warp * segment), seg_end = min(row.end, seg_begin + segment);
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
  CtaValue mine{.i = -1, .d = 0.0};  // (last kept id, mass) of this CTA
  for (int w = 0; w < kWarps; ++w) {
    mine.d += s.segment_mass[w];
    mine.i = max(mine.i, s.segment_last[w]);
  }
  // Every CTA's mass, in rank order: the total, and the CTA the draw lands in.
  CtaValue* slot = &s.published[row.buffer()];
  if (threadIdx.x == 0) *slot = mine;
  row.sync();
  double total = 0.0;
  int last_kept = -1;
  for (int r = 0; r < row.ctas; ++r) {
    const CtaValue v = *row.of_rank(slot, r);
    total += v.d;
    last_kept = max(last_kept, v.i);
  }
  const double target = u * total;
  double before = 0.0;  // mass of the CTAs (then warps) before the chosen one
  int chosen_rank = -1;
  for (int r = 0; r < row.ctas; ++r) {
    // (Read again rather than kept: 8 doubles more per thread spill at 1,024
    // threads, 64 registers.)
    const double m = row.of_rank(slot, r)->d;
    if (m > 0.0 && before + m > target) {
      chosen_rank = r;
      break;
    }
    before += m;
  }
  int token = -1;  // this CTA's pick (the chosen CTA only)
  if (chosen_rank == row.rank) {
    int chosen = -1;
    for (int w = 0; w < kWarps; ++w) {
      if (s.segment_mass[w] > 0.0 && before + s.segment_mass[w] > target) {
        chosen = w;
        break;
      }
      before += s.segment_mass[w];
    }
    token = mine.i;  // u * mass rounded up past this CTA's last warp
    if (chosen >= 0) {
      if (warp == chosen) {
        double cumulative = before;
        const int begin = min(row.end, row.begin + chosen * segment), end = min(row.end, begin + segment);
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
  if (chosen_rank < 0) return last_kept;  // u * mass rounded up to the full mass
  return row.combine({.i = token}, s, [](CtaValue& a, const CtaValue& b) { a.i = max(a.i, b.i); }).i;
}

// Block scan: Σ of v over threads 0..threadIdx.x, in thread order.
__device__ double block_inclusive_scan(double v, Shared& s) {
  v = warp_inclusive_scan(v);
  __syncthreads();
  if ((threadIdx.x & 31) == 31) s.reduce_d[threadIdx.x / 32] = v;
  __syncthreads();
  for (int w = 0; w < int(threadIdx.x / 32); ++w) v += s.reduce_d[w];
  return v;
}

// Rank 0 alone, over the n (<= kMaxCandidates) gathered candidates, which
// hold every token that can be kept: the top-k among them (top_k > 0), the
// top-p bound over those (of top_p_target, or when < 0 of top_p times
// their mass), min-p and the draw, as the passes over the row would give
// them (the same definitions; sums in id order). Returns the token.
__device__ int sample_candidates(int n, float max_logit, int top_k, double top_p_target, float min_p_bound,
                                 const SampleRowParams& p, Shared& s) {
  const int t = threadIdx.x;
  const bool active = t < n;
  // Ids are distinct: a candidate's place in id order is how many ids are below it.
  if (active) {
    const Candidate mine = s.candidates[t];
    int place = 0;
    for (int j = 0; j < n; ++j) place += s.candidates[j].id < mine.id ? 1 : 0;
    s.by_id[place] = mine;
  }
  __syncthreads();
  const float q = active ? s.by_id[t].q : -INFINITY;
  // In the top-k: fewer than k candidates above it (ties of the k-th stay).
  bool in_k = active;
  if (top_k > 0 && active) {
    int greater = 0;
    for (int j = 0; j < n; ++j) greater += s.by_id[j].q > q ? 1 : 0;
    in_k = greater < top_k;
  }
  const double w = in_k ? double(token_weight(q, max_logit)) : 0.0;
  if (active) s.weight[t] = w;
  float top_p_bound = -INFINITY;
  if (p.top_p < 1.0f) {
    const double target = top_p_target >= 0.0 ? top_p_target : double(p.top_p) * block_sum(w, s);
    if (target <= 0.0) {
      top_p_bound = max_logit;  // the first token is always kept
    } else {
      // The lowest candidate value whose mass strictly above is < target.
      __syncthreads();  // (s.weight written)
      double above = 0.0;
      for (int j = 0; j < n; ++j) above += s.by_id[j].q > q ? s.weight[j] : 0.0;
      top_p_bound = -block_max(in_k && above < target ? -q : -INFINITY, s);
    }
  }
  const float bound = fmaxf(top_p_bound, min_p_bound);
  const bool kept = in_k && q >= bound;
  // The inverse CDF over the kept candidates in id order.
  const double running = block_inclusive_scan(kept ? w : 0.0, s);
  double total = 0.0;  // (the scan left each warp's sum in s.reduce_d)
  for (int w = 0; w < kWarps; ++w) total += s.reduce_d[w];
  const double target = p.u * total;
  int pick = block_min(kept && running > target ? t : INT_MAX, s);
  if (pick == INT_MAX) pick = -block_min(kept ? -t : 1, s);  // u * mass rounded up: the last kept
  return s.by_id[pick].id;
}

// Steps 5 and 6 of a sampled row: the top-k, top-p and min-p bounds over the
// processed logits, then the draw. Once a radix select has narrowed the
// tokens that can be kept to at most kMaxCandidates (those from a key
// prefix up), they are gathered into rank 0, which finishes alone: no more
// passes over the row, no more cluster barriers. Returns the token (on rank
// 0 at least).
__device__ int sample_processed(const float* proc, float* weights, int vocab, float max_logit, const SampleRowParams& p,
                                RowCtas& row, Shared& s, double* warp_mass) {
  const float kInf = INFINITY;
  const float min_p_bound = p.use_min_p ? max_logit + p.log_min_p : -kInf;
  const bool use_top_p = p.top_p < 1.0f;
  // Top-k: the k-th largest processed logit, or a prefix with few tokens from it up.
  const bool top_k = p.top_k > 0 && p.top_k < vocab;
  float top_k_bound = -kInf;
  if (top_k) {
    const RadixCut cut = radix_select<false>(
        row,
        [&](int i, uint32_t& key) {
          key = order_key(proc[i]);
          return true;
        },
        NoWeight{}, p.top_k, 0.0, s, nullptr, kMaxCandidates);
    if (cut.from_key <= kMaxCandidates) {
      const int n = gather_candidates(proc, -kInf, cut.key, true, row, s);
      return row.rank == 0 ? sample_candidates(n, max_logit, p.top_k, -1.0, min_p_bound, p, s) : -1;
    }
    top_k_bound = key_value(cut.key);
  }
  // Top-p over the tokens from the top-k bound up: its mass, then the cut.
  const float candidate_bound = use_top_p ? top_k_bound : fmaxf(top_k_bound, min_p_bound);
  float top_p_bound = -kInf;
  if (use_top_p) {
    double mass = 0.0;
    for (int i = row.begin + threadIdx.x; i < row.end; i += kThreads) {
      const float q = proc[i];
      if (q >= candidate_bound && q != -kInf) {
        const float w = token_weight(q, max_logit);
        weights[i] = w;  // (the select below asks again, pass after pass)
        mass += double(w);
      }
    }
    const double target = double(p.top_p) * row_sum(mass, row, s);
    if (target <= 0.0) {
      top_p_bound = max_logit;  // the first token is always kept
    } else {
      const RadixCut cut = radix_select<true>(
          row,
          [&](int i, uint32_t& key) {
            const float q = proc[i];
            if (!(q >= candidate_bound && q != -kInf)) return false;
            key = order_key(q);
            return true;
          },
          [&](int i) { return weights[i]; }, 0, target, s, warp_mass, kMaxCandidates);
      if (cut.from_key <= kMaxCandidates) {
        const int n = gather_candidates(proc, candidate_bound, cut.key, true, row, s);
        return row.rank == 0 ? sample_candidates(n, max_logit, 0, target, min_p_bound, p, s) : -1;
      }
      top_p_bound = key_value(cut.key);
    }
  }
  const float bound = fmaxf(fmaxf(top_k_bound, top_p_bound), min_p_bound);
  return draw(proc, bound, max_logit, p.u, row, s);
}

// A row that ends without a token (skipped, or a failure `status`; for
// BadLogit, raw[bad] is the first NaN or +inf), by thread 0 of rank 0.
__device__ void write_no_token(SampleResult* out, int32_t* token_out, SampleStatus status, const RowCtas& row,
                               const float* raw = nullptr, int bad = -1) {
  if (row.rank != 0 || threadIdx.x != 0) return;
  *token_out = 0;
  out->status = status;
  out->token = -1;
  out->n_top = 0;
  if (bad >= 0) {
    out->bad_index = bad;
    out->bad_value = raw[bad];
  }
}

// The row's result, by thread 0 of rank 0 (which holds the token and the
// gathered top tokens).
__device__ void write_result(SampleResult* out, int32_t* token_out, int token, int n_top, bool want_logprobs,
                             double log_z, const float* raw, const RowCtas& row, Shared& s) {
  if (row.rank != 0 || threadIdx.x != 0) return;
  *token_out = token;
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

__global__ void __launch_bounds__(kThreads) sample_kernel(const float* logits, int64_t stride, int vocab,
                                                          const SampleRowParams* rows,        // [n_rows]
                                                          const SamplePenaltyEntry* entries,  // [n_entries]
                                                          const float* biases,                // [n_biases]
                                                          const uint32_t* masks,              // [n_masks, mask_words]
                                                          int mask_words,
                                                          float* scratch,         // [n_rows, 2, vocab]
                                                          SampleResult* results,  // [n_rows]
                                                          int32_t* tokens) {      // [n_rows]
  __shared__ Shared s;
  extern __shared__ double warp_mass[];  // [kWarps, 256]
  RowCtas row(vocab);
  const int row_index = int(blockIdx.x) / row.ctas;
  const SampleRowParams p = rows[row_index];
  SampleResult* out = results + row_index;
  int32_t* token_out = tokens + row_index;
  const float kInf = INFINITY;
  if (p.skip) {  // (every CTA of the row: none reads another's shared memory)
    write_no_token(out, token_out, SampleStatus::Ok, row);
    return;
  }
  const float* raw = logits + int64_t(p.logit_row) * stride;  // [vocab]
  const uint32_t* mask = p.mask_index >= 0 ? masks + int64_t(p.mask_index) * mask_words : nullptr;
  const bool greedy = p.greedy != 0;
  const bool has_entries = p.entry_end > p.entry_begin;
  const bool write_processed = has_entries || mask != nullptr || (!greedy && p.temperature != 1.0f);
  float* processed = scratch + int64_t(row_index) * 2 * vocab;  // [vocab]
  float* weights = processed + vocab;                           // [vocab]: top-p candidates' token_weight
  const float* proc = write_processed ? processed : raw;

  // 1. Raw row: NaN/+inf check, max; processed logits (mask, temperature)
  //    for every token, penalties overwrite their tokens below. Each CTA
  //    writes and reads only its own slice of `processed`.
  float raw_max = -kInf;
  int bad = INT_MAX;
  for (int i = row.begin + threadIdx.x; i < row.end; i += kThreads) {
    const float l = raw[i];
    if (!(l < kInf)) bad = min(bad, i);
    raw_max = fmaxf(raw_max, l);
    if (write_processed) processed[i] = !allowed(mask, i) ? -kInf : greedy ? l : l / p.temperature;
  }
  {
    const CtaValue mine{.f = block_max(raw_max, s), .i = block_min(bad, s)};
    const CtaValue all = row.combine(mine, s, [](CtaValue& a, const CtaValue& b) {
      a.f = fmaxf(a.f, b.f);
      a.i = min(a.i, b.i);
    });
    raw_max = all.f;
    bad = all.i;
  }
  if (bad != INT_MAX) {
    write_no_token(out, token_out, SampleStatus::BadLogit, row, raw, bad);
    row.finish();
    return;
  }

  // 2. Raw logprobs: log Z = max + log sum exp(l - max), in double.
  const bool want_logprobs = p.want_logprobs != 0 || p.top_logprobs > 0;
  double log_z = 0.0;
  if (want_logprobs) {
    if (raw_max == -kInf) {
      log_z = -double(kInf);
    } else {
      double sum = 0.0;
      for (int i = row.begin + threadIdx.x; i < row.end; i += kThreads) sum += exp(double(raw[i]) - double(raw_max));
      log_z = double(raw_max) + log(row_sum(sum, row, s));
    }
  }
  int n_top = 0;
  if (p.top_logprobs > 0) n_top = top_raw_tokens(raw, min(p.top_logprobs, vocab), row, s);

  // 3. Penalties and bias, each distinct token once (host order: repetition,
  //    presence/frequency, bias), then its mask bit and temperature; each
  //    CTA the tokens of its slice.
  if (has_entries) {
    for (int e = p.entry_begin + int(threadIdx.x); e < p.entry_end; e += kThreads) {
      const SamplePenaltyEntry entry = entries[e];
      if (entry.token < row.begin || entry.token >= row.end) continue;
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
  for (int i = row.begin + threadIdx.x; i < row.end; i += kThreads) {
    const float q = proc[i];
    if (q > best) {
      best = q;
      best_index = i;
    }
  }
  row_argmax(best, best_index, row, s);
  if (best == -kInf) {
    write_no_token(out, token_out, SampleStatus::NothingAllowed, row);
    row.finish();
    return;
  }
  const float max_logit = best;

  int token = best_index;
  if (!greedy) token = sample_processed(proc, weights, vocab, max_logit, p, row, s, warp_mass);
  write_result(out, token_out, token, n_top, want_logprobs, log_z, raw, row, s);
  row.finish();
}

// Plain greedy rows (plain_greedy): the first maximum of the raw row, with
// sample_kernel's checks and results, one CTA a row and no cluster. At batch
// 1 the full kernel's launch (a cluster of 1,024-thread CTAs with 64 KB of
// shared memory each) and its three cluster barriers took ~14 µs for one
// pass over the row (docs/perf-log/cuda-decode.md#run-ahead).
__global__ void __launch_bounds__(kThreads) greedy_kernel(const float* logits, int64_t stride, int vocab,
                                                          const SampleRowParams* rows,  // [n_rows]
                                                          SampleResult* results,        // [n_rows]
                                                          int32_t* tokens) {            // [n_rows]
  __shared__ Shared s;
  RowCtas row(vocab);  // (launched without clusters: a cluster of one CTA, the whole row)
  const float* raw = logits + int64_t(rows[blockIdx.x].logit_row) * stride;  // [vocab]
  SampleResult* out = results + blockIdx.x;
  int32_t* token_out = tokens + blockIdx.x;
  float best = -INFINITY;
  int best_index = INT_MAX, bad = INT_MAX;
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const float l = raw[i];
    if (!(l < INFINITY)) bad = min(bad, i);
    if (l > best) {  // (NaN never wins; the first maximum of this thread's ids)
      best = l;
      best_index = i;
    }
  }
  block_argmax(best, best_index, s);
  bad = block_min(bad, s);
  if (bad != INT_MAX)
    write_no_token(out, token_out, SampleStatus::BadLogit, row, raw, bad);
  else if (best == -INFINITY)
    write_no_token(out, token_out, SampleStatus::NothingAllowed, row);
  else
    write_result(out, token_out, best_index, 0, false, 0.0, raw, row, s);
}

size_t align_up(size_t bytes) { return (bytes + 255) & ~size_t(255); }

cudaLaunchConfig_t launch_config(int n_rows, int ctas, cudaStream_t stream, cudaLaunchAttribute& cluster) {
  cluster = {.id = cudaLaunchAttributeClusterDimension};
  cluster.val.clusterDim = {unsigned(ctas), 1u, 1u};
  return {.gridDim = dim3(unsigned(n_rows) * unsigned(ctas)),
          .blockDim = dim3(kThreads),
          .dynamicSmemBytes = kWarpMassBytes,
          .stream = stream,
          .attrs = &cluster,
          .numAttrs = 1};
}

// Grows pinned host buffer to at least `bytes` (contents not kept).
void grow_pinned(void*& buffer, size_t& capacity, size_t bytes) {
  if (capacity >= bytes) return;
  if (buffer != nullptr) CUDA_CHECK(cudaFreeHost(buffer));
  buffer = nullptr;
  capacity = 0;
  const size_t size = std::max<size_t>(bytes, 64 << 10);
  CUDA_CHECK(cudaMallocHost(&buffer, size));
  capacity = size;
}

}  // namespace

bool plain_greedy(const SampleBatch& batch) {
  return std::all_of(batch.rows.begin(), batch.rows.end(), [](const SampleRowParams& p) {
    return p.greedy && !p.skip && p.entry_begin == p.entry_end && p.mask_index < 0 && !p.want_logprobs &&
           p.top_logprobs == 0;
  });
}

// CTAs per row: the most (a power of two up to kMaxCtasPerRow) whose
// clusters all fit on the GPU at once. A cluster's CTAs share one GPC, and a
// CTA of 1024 threads holds an SM's registers, so fewer clusters of 8 fit
// than SMs / 8 (the H200's GPCs are not all multiples of 8 SMs).
int sample_ctas_per_row(int n_rows) {
  static const std::array<int, kMaxCtasPerRow + 1> max_clusters = [] {
    CUDA_CHECK(cudaFuncSetAttribute(sample_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kWarpMassBytes)));
    std::array<int, kMaxCtasPerRow + 1> fit{};
    for (int ctas = 2; ctas <= kMaxCtasPerRow; ctas *= 2) {
      cudaLaunchAttribute cluster;
      const cudaLaunchConfig_t config = launch_config(ctas, ctas, nullptr, cluster);
      CUDA_CHECK(cudaOccupancyMaxActiveClusters(&fit[size_t(ctas)], sample_kernel, &config));
    }
    return fit;
  }();
  for (int ctas = kMaxCtasPerRow; ctas > 1; ctas /= 2)
    if (n_rows <= max_clusters[size_t(ctas)]) return ctas;
  return 1;
}

// The pinned staging of a run (reused by its launches: a launch starts
// after the last one's results were read or waited for), the device buffers
// of its launch in flight and the event that marks the results' arrival.
struct SampleRun::Impl {
  void* upload = nullptr;
  size_t upload_capacity = 0;
  void* download = nullptr;
  size_t download_capacity = 0;
  SideCopyEvents copy;  // copy.done: the results are in `download`
  std::shared_ptr<void> device_upload, device_results, scratch, tokens;
  size_t n_rows = 0;
  bool pending = false;

  void wait() {
    if (pending) host_waits_for(copy.done);
    pending = false;
  }
};

SampleRun::SampleRun() : impl_(std::make_unique<Impl>()) {}

SampleRun::~SampleRun() {
  // The copies in flight read and write the pinned buffers: wait for them
  // before freeing (without throwing from a destructor).
  if (impl_->pending) cudaEventSynchronize(static_cast<cudaEvent_t>(impl_->copy.done.get()));
  if (impl_->upload != nullptr) cudaFreeHost(impl_->upload);
  if (impl_->download != nullptr) cudaFreeHost(impl_->download);
}

const int32_t* SampleRun::tokens() const { return static_cast<const int32_t*>(impl_->tokens.get()); }

void SampleRun::launch(const SampleRowsArgs& a) {
  const SampleBatch& b = *a.batch;
  const size_t n_rows = b.rows.size();
  BRIOCHE_CHECK(n_rows > 0, "cuda::SampleRun::launch: expected at least one row");
  BRIOCHE_CHECK(b.vocab > 0 && a.logits_stride >= b.vocab,
                "cuda::SampleRun::launch: expected vocab > 0 and a row stride >= vocab, got vocab ", b.vocab,
                " and stride ", a.logits_stride);
  const int mask_words = (b.vocab + 31) / 32;
  BRIOCHE_CHECK(b.masks.size() % size_t(mask_words) == 0, "cuda::SampleRun::launch: masks hold ", b.masks.size(),
                " words, expected a multiple of ", mask_words, " (ceil(vocab / 32))");
  for (const SampleRowParams& row : b.rows) {
    BRIOCHE_CHECK(row.top_logprobs <= kMaxDeviceTopLogprobs, "cuda::SampleRun::launch: top_logprobs ", row.top_logprobs,
                  " exceeds the device limit ", kMaxDeviceTopLogprobs);
    BRIOCHE_CHECK(
        row.entry_begin >= 0 && row.entry_end <= int32_t(b.entries.size()) && row.entry_begin <= row.entry_end,
        "cuda::SampleRun::launch: entry range [", row.entry_begin, ", ", row.entry_end, ") outside ", b.entries.size());
    BRIOCHE_CHECK(row.mask_index < int32_t(b.masks.size() / size_t(mask_words)), "cuda::SampleRun::launch: mask ",
                  row.mask_index, " of ", b.masks.size() / size_t(mask_words));
  }
  Impl& r = *impl_;
  r.wait();  // the staging buffers are the last launch's until then

  // One upload: rows | entries | biases | masks.
  const size_t rows_bytes = align_up(n_rows * sizeof(SampleRowParams));
  const size_t entries_bytes = align_up(b.entries.size() * sizeof(SamplePenaltyEntry));
  const size_t biases_bytes = align_up(b.biases.size() * sizeof(float));
  const size_t masks_bytes = align_up(b.masks.size() * sizeof(uint32_t));
  const size_t upload_bytes = rows_bytes + entries_bytes + biases_bytes + masks_bytes;
  const size_t results_bytes = n_rows * sizeof(SampleResult);

  grow_pinned(r.upload, r.upload_capacity, upload_bytes);
  grow_pinned(r.download, r.download_capacity, results_bytes);
  char* host = static_cast<char*>(r.upload);
  std::memcpy(host, b.rows.data(), n_rows * sizeof(SampleRowParams));
  if (!b.entries.empty())
    std::memcpy(host + rows_bytes, b.entries.data(), b.entries.size() * sizeof(SamplePenaltyEntry));
  if (!b.biases.empty())
    std::memcpy(host + rows_bytes + entries_bytes, b.biases.data(), b.biases.size() * sizeof(float));
  if (!b.masks.empty())
    std::memcpy(host + rows_bytes + entries_bytes + biases_bytes, b.masks.data(), b.masks.size() * sizeof(uint32_t));

  cudaStream_t stream = detail::current_stream();
  r.device_upload = allocate(upload_bytes);
  r.device_results = allocate(results_bytes);
  r.scratch = allocate(n_rows * 2 * size_t(b.vocab) * sizeof(float));
  r.tokens = allocate(n_rows * sizeof(int32_t));
  r.n_rows = n_rows;
  char* dev = static_cast<char*>(r.device_upload.get());
  CUDA_CHECK(cudaMemcpyAsync(dev, host, upload_bytes, cudaMemcpyHostToDevice, stream));
  if (plain_greedy(b)) {
    greedy_kernel<<<unsigned(n_rows), kThreads, 0, stream>>>(
        a.logits, a.logits_stride, b.vocab, reinterpret_cast<const SampleRowParams*>(dev),
        static_cast<SampleResult*>(r.device_results.get()), static_cast<int32_t*>(r.tokens.get()));
    CUDA_CHECK_LAUNCH();
  } else {
    cudaLaunchAttribute cluster;
    const cudaLaunchConfig_t config = launch_config(int(n_rows), sample_ctas_per_row(int(n_rows)), stream, cluster);
    CUDA_CHECK(cudaLaunchKernelEx(
        &config, sample_kernel, a.logits, a.logits_stride, b.vocab, reinterpret_cast<const SampleRowParams*>(dev),
        reinterpret_cast<const SamplePenaltyEntry*>(dev + rows_bytes),
        reinterpret_cast<const float*>(dev + rows_bytes + entries_bytes),
        reinterpret_cast<const uint32_t*>(dev + rows_bytes + entries_bytes + biases_bytes), mask_words,
        static_cast<float*>(r.scratch.get()), static_cast<SampleResult*>(r.device_results.get()),
        static_cast<int32_t*>(r.tokens.get())));
  }
  // The results come back on the side stream, so that work queued next on
  // this one (the next decode step) does not wait for their copy.
  copy_on_side_stream(r.download, r.device_results.get(), results_bytes, r.copy);
  r.pending = true;
}

void SampleRun::collect(std::span<SampleResult> results) {
  Impl& r = *impl_;
  BRIOCHE_CHECK(r.pending, "cuda::SampleRun::collect: nothing was launched since the last collect");
  BRIOCHE_CHECK(results.size() == r.n_rows, "cuda::SampleRun::collect: expected ", r.n_rows, " result slots, got ",
                results.size());
  r.wait();
  std::memcpy(results.data(), r.download, r.n_rows * sizeof(SampleResult));
}

}  // namespace brioche::cuda
