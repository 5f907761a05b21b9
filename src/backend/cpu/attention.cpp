#include "backend/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "backend/cpu/attention_kernels.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/vec_f32.h"
#include "core/error.h"
#include "core/half.h"
#include "core/thread_pool.h"

namespace brioche::backend::cpu {

namespace {

// dst[i] = f16(src[i]), rounded to nearest even like f32_to_f16.
void f32_to_f16_row(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
#if BRIOCHE_VEC_AVX2
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
#endif
  for (; i < n; ++i) dst[i] = f32_to_f16(src[i]);
}

}  // namespace

void store_kv(const StoreKvArgs& a) {
  const int64_t slot_elems = a.kv_dim;  // one position: all kv heads
  const int64_t block_elems = int64_t(a.cache.block_size) * slot_elems;
  for (int s = 0; s < a.n_sequences; ++s) {
    const KvSequence& seq = a.sequences[s];
    ThreadPool::global().parallel_for(seq.n_rows, 64, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        int64_t pos = seq.n_past + i;
        int64_t block = seq.block_table[pos / a.cache.block_size];
        int64_t offset = block * block_elems + (pos % a.cache.block_size) * slot_elems;
        const float* k = a.k + (seq.first_row + i) * a.k_stride;
        const float* v = a.v + (seq.first_row + i) * a.v_stride;
        if (a.cache.f16) {
          uint16_t* kd = static_cast<uint16_t*>(a.cache.k) + offset;
          uint16_t* vd = static_cast<uint16_t*>(a.cache.v) + offset;
          f32_to_f16_row(k, kd, slot_elems);
          f32_to_f16_row(v, vd, slot_elems);
        } else {
          std::memcpy(static_cast<float*>(a.cache.k) + offset, k, slot_elems * sizeof(float));
          std::memcpy(static_cast<float*>(a.cache.v) + offset, v, slot_elems * sizeof(float));
        }
      }
    });
  }
}

namespace {

inline float dot_kv(const float* q, const float* k, int n) { return dot_f32(q, k, n); }
inline float dot_kv(const float* q, const uint16_t* k, int n) { return dot_f32_f16(q, k, n); }
inline void axpy_kv(float* y, float a, const float* v, int n) { axpy_f32(y, a, v, n); }
inline void axpy_kv(float* y, float a, const uint16_t* v, int n) { axpy_f32_f16(y, a, v, n); }

// One unit of work: rows [row_begin, row_end) of one sequence, the query
// heads of one kv head.
struct AttentionTask {
  int sequence;
  int kv_head;
  int32_t row_begin, row_end;  // offsets within the sequence
};

#if BRIOCHE_VEC_AVX2
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }

// [Σ a0, Σ a1, ..., Σ a7]: eight horizontal sums in one vector (hadd tree).
inline __m256 hsum8x8(const __m256 a[8]) {
  const __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}
#endif

// scores[j] = scale · q·k_j for n keys at stride slot_stride.
template <typename T>
void score_keys(const float* q, const T* kb, int64_t slot_stride, int d, int64_t n, float scale, float* scores) {
  int64_t j = 0;
#if BRIOCHE_VEC_AVX2
  if (d % 8 == 0) {
    for (; j + 8 <= n; j += 8) {
      __m256 acc[8];
#pragma GCC unroll 8
      for (int t = 0; t < 8; ++t) acc[t] = _mm256_setzero_ps();
      for (int i = 0; i < d; i += 8) {
        const __m256 qv = _mm256_loadu_ps(q + i);
#pragma GCC unroll 8
        for (int t = 0; t < 8; ++t) acc[t] = _mm256_fmadd_ps(qv, load8(kb + (j + t) * slot_stride + i), acc[t]);
      }
      _mm256_storeu_ps(scores + j, _mm256_mul_ps(hsum8x8(acc), _mm256_set1_ps(scale)));
    }
  }
#endif
  for (; j < n; ++j) scores[j] = dot_kv(q, kb + j * slot_stride, d) * scale;
}

// x[j] = e^(x[j] − max x) for j < n; returns Σ_j x[j].
inline float softmax_numerators(float* x, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
  int64_t j = 0;
#if BRIOCHE_VEC_AVX2
  // Four running maxima: one would wait on vmaxps's latency at every step.
  __m256 vmax[4];
  for (__m256& v : vmax) v = _mm256_set1_ps(m);
  for (; j + 32 <= n; j += 32)
    for (int c = 0; c < 4; ++c) vmax[c] = _mm256_max_ps(vmax[c], _mm256_loadu_ps(x + j + 8 * c));
  for (; j + 8 <= n; j += 8) vmax[0] = _mm256_max_ps(vmax[0], _mm256_loadu_ps(x + j));
  const __m256 v = _mm256_max_ps(_mm256_max_ps(vmax[0], vmax[1]), _mm256_max_ps(vmax[2], vmax[3]));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  m = _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
#endif
  for (; j < n; ++j) m = std::max(m, x[j]);
  j = 0;
  float sum = 0.0f;
#if BRIOCHE_VEC_AVX2
  __m256 vsum = _mm256_setzero_ps();
  for (; j + 8 <= n; j += 8) {
    const __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(x + j), _mm256_set1_ps(m)));
    _mm256_storeu_ps(x + j, e);
    vsum = _mm256_add_ps(vsum, e);
  }
  sum = hsum256(vsum);
#endif
  for (; j < n; ++j) sum += (x[j] = std::exp(x[j] - m));
  return sum;
}

// acc += Σ_j probs[j] · v_j, each 8-wide slice of acc loaded and stored once;
// the keys are split over 4 independent FMA chains (one chain would wait on
// the FMA latency at every key).
template <typename T>
void accumulate_values(const float* probs, const T* vb, int64_t slot_stride, int d, int64_t n, float* acc) {
#if BRIOCHE_VEC_AVX2
  if (d % 8 == 0) {
    for (int i = 0; i < d; i += 8) {
      __m256 a[4] = {_mm256_loadu_ps(acc + i), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
      int64_t j = 0;
      for (; j + 4 <= n; j += 4) {
#pragma GCC unroll 4
        for (int c = 0; c < 4; ++c)
          a[c] = _mm256_fmadd_ps(_mm256_broadcast_ss(probs + j + c), load8(vb + (j + c) * slot_stride + i), a[c]);
      }
      for (; j < n; ++j) a[0] = _mm256_fmadd_ps(_mm256_broadcast_ss(probs + j), load8(vb + j * slot_stride + i), a[0]);
      _mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3])));
    }
    return;
  }
#endif
  for (int64_t j = 0; j < n; ++j) axpy_kv(acc, probs[j], vb + j * slot_stride, d);
}

// AVX2 versions of the inner loops (any head_dim), as AttentionKernels.
template <typename T>
const AttentionKernels<T>& attention_kernels_avx2() {
  static const AttentionKernels<T> kernels{score_keys<T>, accumulate_values<T>};
  return kernels;
}

template <typename T>
const AttentionKernels<T>& kernels_for(int head_dim) {
  const brioche::cpu::Isa isa = brioche::cpu::active_isa();
  if (head_dim % 16 == 0 && (isa == brioche::cpu::Isa::Avx512 || isa == brioche::cpu::Isa::Avx512Vnni)) {
    if constexpr (std::is_same_v<T, float>)
      return attention_kernels_avx512_f32();
    else
      return attention_kernels_avx512_f16();
  }
  return attention_kernels_avx2<T>();
}

// Attention of one query row of every head of a GQA group (the `group`
// query heads that read kv head `kv_head`) against positions
// [first_key, last_key], in two passes over the paged cache:
//   s_j = scale·q·k_j for every key (pass 1, one cache block at a time);
//   p_j = e^(s_j − max s) / Σ e^(s − max s);   out = Σ_j p_j·v_j (pass 2).
// Holding the whole row of scores (group × keys floats) avoids the online
// softmax's per-block rescaling. The group's heads walk each block together,
// so it is fetched (and the next one prefetched) once for all of them. A row
// is computed the same way whatever else is in the batch, so a sequence's
// output does not depend on its neighbours. q and out hold the group's heads
// at stride head_dim; scores has room for group × round_up(keys, 16).
template <typename T>
void attend_group(const PagedAttentionArgs& a, const KvSequence& seq, int kv_head, int group,
                  const AttentionKernels<T>& kernels, const float* q, int64_t first_key, int64_t last_key,
                  float* scores, float* out) {
  const int d = a.head_dim;
  const int bs = a.cache.block_size;
  const int64_t slot_stride = int64_t(a.n_kv_heads) * d;  // elements per position
  const int64_t block_stride = int64_t(bs) * slot_stride;
  const T* k_base = static_cast<const T*>(a.cache.k) + int64_t(kv_head) * d;
  const T* v_base = static_cast<const T*>(a.cache.v) + int64_t(kv_head) * d;
  const int64_t n_keys = last_key - first_key + 1;
  const int64_t scores_stride = (n_keys + 15) / 16 * 16;

  // Calls fn(offset of the run among the keys, its slots in `base`, run
  // length) for each run of keys inside one cache block, prefetching the
  // next block: it is elsewhere in the cache, where the hardware prefetcher
  // cannot guess it.
  const size_t row_bytes = size_t(d) * sizeof(T);
  auto for_each_block = [&](const T* base, auto&& fn) {
    for (int64_t key0 = first_key; key0 <= last_key;) {
      const int64_t block_index = key0 / bs;
      const int64_t slot0 = key0 % bs;
      const int64_t n = std::min<int64_t>(bs - slot0, last_key - key0 + 1);
      if (key0 + n <= last_key) {
        const T* next = base + seq.block_table[block_index + 1] * block_stride;
        const int64_t rows = std::min<int64_t>(bs, last_key - (key0 + n) + 1);
        for (int64_t j = 0; j < rows; ++j) {
          const char* slot = reinterpret_cast<const char*>(next + j * slot_stride);
          for (size_t off = 0; off < row_bytes; off += 64) __builtin_prefetch(slot + off);
        }
      }
      fn(key0 - first_key, base + seq.block_table[block_index] * block_stride + slot0 * slot_stride, n);
      key0 += n;
    }
  };

  for_each_block(k_base, [&](int64_t offset, const T* kb, int64_t n) {
    for (int h = 0; h < group; ++h)
      kernels.score_keys(q + int64_t(h) * d, kb, slot_stride, d, n, a.scale, scores + h * scores_stride + offset);
  });
  float inv_sum[16];
  for (int h = 0; h < group; ++h) inv_sum[h] = 1.0f / softmax_numerators(scores + h * scores_stride, n_keys);
  std::fill(out, out + int64_t(group) * d, 0.0f);
  for_each_block(v_base, [&](int64_t offset, const T* vb, int64_t n) {
    for (int h = 0; h < group; ++h)
      kernels.accumulate_values(scores + h * scores_stride + offset, vb, slot_stride, d, n, out + int64_t(h) * d);
  });
  for (int h = 0; h < group; ++h) scale_f32(out + int64_t(h) * d, inv_sum[h], d);
}

template <typename T>
void paged_attention_typed(const PagedAttentionArgs& a) {
  // Tasks: sequences × kv heads × chunks of rows, so both a long prefill and
  // a batch of single-row decodes spread over the threads. A task runs every
  // query head of its kv head (GQA group) back to back, so the keys and values
  // it reads from the cache are still in L1/L2 for the group's other heads.
  constexpr int32_t kRowsPerTask = 16;
  std::vector<AttentionTask> tasks;
  int64_t longest = 0;  // keys of the longest row
  for (int s = 0; s < a.n_sequences; ++s) {
    const KvSequence& seq = a.sequences[s];
    longest = std::max<int64_t>(longest, int64_t(seq.n_past) + seq.n_rows);
    for (int kv_head = 0; kv_head < a.n_kv_heads; ++kv_head) {
      for (int32_t r = 0; r < seq.n_rows; r += kRowsPerTask) {
        tasks.push_back({s, kv_head, r, std::min(seq.n_rows, r + kRowsPerTask)});
      }
    }
  }
  const int group = a.n_heads / a.n_kv_heads;
  BRIOCHE_CHECK(group >= 1 && group <= 16 && group * a.n_kv_heads == a.n_heads, "paged_attention: ", a.n_heads,
                " query heads over ", a.n_kv_heads, " kv heads (expected groups of 1 to 16)");
  const AttentionKernels<T>& kernels = kernels_for<T>(a.head_dim);
  const size_t scratch_floats = size_t(group) * size_t((longest + 15) / 16 * 16);
  ThreadPool::global().run(int(tasks.size()), [&](int t) {
    const AttentionTask& task = tasks[t];
    const KvSequence& seq = a.sequences[task.sequence];
    thread_local std::vector<float> scores;
    if (scores.size() < scratch_floats) scores.resize(scratch_floats);
    for (int32_t i = task.row_begin; i < task.row_end; ++i) {
      int64_t row = seq.first_row + i;
      int64_t pos = int64_t(seq.n_past) + i;
      int64_t first_key = a.sliding_window > 0 ? std::max<int64_t>(0, pos - a.sliding_window + 1) : 0;
      // The group's query heads are adjacent: heads [kv_head·group, (kv_head+1)·group).
      const float* q = a.q + row * a.q_stride + int64_t(task.kv_head) * group * a.head_dim;
      float* out = a.out + row * a.out_stride + int64_t(task.kv_head) * group * a.head_dim;
      attend_group<T>(a, seq, task.kv_head, group, kernels, q, first_key, pos, scores.data(), out);
    }
  });
}

}  // namespace

void paged_attention(const PagedAttentionArgs& a) {
  if (a.cache.f16) {
    paged_attention_typed<uint16_t>(a);
  } else {
    paged_attention_typed<float>(a);
  }
}

}  // namespace brioche::backend::cpu
