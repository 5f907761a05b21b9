#include "backend/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/vec_f32.h"
#include "core/error.h"
#include "core/half.h"
#include "core/thread_pool.h"

namespace brioche::backend::cpu {

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
          for (int64_t e = 0; e < slot_elems; ++e) {
            kd[e] = f32_to_f16(k[e]);
            vd[e] = f32_to_f16(v[e]);
          }
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

// probs[j] = e^(scores[j] - m) for j < n.
inline void exp_shifted(const float* scores, int64_t n, float m, float* probs) {
  int64_t j = 0;
#if BRIOCHE_VEC_AVX2
  for (; j + 8 <= n; j += 8)
    _mm256_storeu_ps(probs + j, exp256(_mm256_sub_ps(_mm256_loadu_ps(scores + j), _mm256_set1_ps(m))));
#endif
  for (; j < n; ++j) probs[j] = std::exp(scores[j] - m);
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

// Attention of one query row of every head of a GQA group (the `group`
// query heads that read kv head `kv_head`) against positions
// [first_key, last_key], with the online (streaming) softmax, one cache block
// at a time; per head:
//   m' = max(m, max_j s_j);  l' = l·e^(m−m') + Σ_j e^(s_j−m');
//   acc' = acc·e^(m−m') + Σ_j e^(s_j−m')·v_j;   out = acc / l.
// The group's heads walk the blocks together, so each block is fetched
// (and the next one prefetched) once for all of them; each head's arithmetic
// is the same as walking it alone. q and out hold the group's heads at
// stride head_dim; scores has room for one block of keys, acc for
// [group, head_dim].
template <typename T>
void attend_group(const PagedAttentionArgs& a, const KvSequence& seq, int kv_head, int group, const float* q,
                  int64_t first_key, int64_t last_key, float* scores, float* acc, float* out) {
  constexpr int kMaxGroup = 16;
  const int d = a.head_dim;
  const int bs = a.cache.block_size;
  const int64_t slot_stride = int64_t(a.n_kv_heads) * d;  // elements per position
  const int64_t block_stride = int64_t(bs) * slot_stride;
  const T* k_base = static_cast<const T*>(a.cache.k) + int64_t(kv_head) * d;
  const T* v_base = static_cast<const T*>(a.cache.v) + int64_t(kv_head) * d;

  float m[kMaxGroup], l[kMaxGroup];
  for (int h = 0; h < group; ++h) {
    m[h] = -std::numeric_limits<float>::infinity();
    l[h] = 0.0f;
  }
  std::fill(acc, acc + int64_t(group) * d, 0.0f);
  for (int64_t key0 = first_key; key0 <= last_key;) {
    int64_t block_index = key0 / bs;
    int64_t slot0 = key0 % bs;
    int64_t n = std::min<int64_t>(bs - slot0, last_key - key0 + 1);
    int64_t block = seq.block_table[block_index];
    const T* kb = k_base + block * block_stride + slot0 * slot_stride;
    const T* vb = v_base + block * block_stride + slot0 * slot_stride;
    if (key0 + n <= last_key) {
      // The next block (another place in the cache: the hardware prefetcher
      // cannot guess it) is fetched while this one is worked on.
      const int64_t next_block = seq.block_table[block_index + 1];
      const int64_t rows = std::min<int64_t>(bs, last_key - (key0 + n) + 1);
      const size_t row_bytes = size_t(d) * sizeof(T);
      for (int64_t j = 0; j < rows; ++j) {
        const char* kn = reinterpret_cast<const char*>(k_base + next_block * block_stride + j * slot_stride);
        const char* vn = reinterpret_cast<const char*>(v_base + next_block * block_stride + j * slot_stride);
        for (size_t off = 0; off < row_bytes; off += 64) {
          __builtin_prefetch(kn + off);
          __builtin_prefetch(vn + off);
        }
      }
    }
    for (int h = 0; h < group; ++h) {
      float* acc_h = acc + int64_t(h) * d;
      score_keys(q + int64_t(h) * d, kb, slot_stride, d, n, a.scale, scores);
      float block_max = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < n; ++j) block_max = std::max(block_max, scores[j]);
      float m_new = std::max(m[h], block_max);
      float correction = std::exp(m[h] - m_new);  // 0 on the first block (m = −inf)
      if (correction != 1.0f) {
        scale_f32(acc_h, correction, d);
        l[h] *= correction;
      }
      exp_shifted(scores, n, m_new, scores);
      for (int64_t j = 0; j < n; ++j) l[h] += scores[j];
      accumulate_values(scores, vb, slot_stride, d, n, acc_h);
      m[h] = m_new;
    }
    key0 += n;
  }
  for (int h = 0; h < group; ++h) {
    float inv_l = 1.0f / l[h];
    for (int i = 0; i < d; ++i) out[int64_t(h) * d + i] = acc[int64_t(h) * d + i] * inv_l;
  }
}

template <typename T>
void paged_attention_typed(const PagedAttentionArgs& a) {
  // Tasks: sequences × kv heads × chunks of rows, so both a long prefill and
  // a batch of single-row decodes spread over the threads. A task runs every
  // query head of its kv head (GQA group) back to back, so the keys and values
  // it reads from the cache are still in L1/L2 for the group's other heads.
  constexpr int32_t kRowsPerTask = 16;
  std::vector<AttentionTask> tasks;
  for (int s = 0; s < a.n_sequences; ++s) {
    const KvSequence& seq = a.sequences[s];
    for (int kv_head = 0; kv_head < a.n_kv_heads; ++kv_head) {
      for (int32_t r = 0; r < seq.n_rows; r += kRowsPerTask) {
        tasks.push_back({s, kv_head, r, std::min(seq.n_rows, r + kRowsPerTask)});
      }
    }
  }
  const int group = a.n_heads / a.n_kv_heads;
  BRIOCHE_CHECK(group >= 1 && group <= 16 && group * a.n_kv_heads == a.n_heads, "paged_attention: ", a.n_heads,
                " query heads over ", a.n_kv_heads, " kv heads (expected groups of 1 to 16)");
  ThreadPool::global().run(int(tasks.size()), [&](int t) {
    const AttentionTask& task = tasks[t];
    const KvSequence& seq = a.sequences[task.sequence];
    thread_local std::vector<float> scratch;
    scratch.resize(size_t(a.cache.block_size) + size_t(group) * size_t(a.head_dim));
    float* scores = scratch.data();
    float* acc = scores + a.cache.block_size;  // [group, head_dim]
    for (int32_t i = task.row_begin; i < task.row_end; ++i) {
      int64_t row = seq.first_row + i;
      int64_t pos = int64_t(seq.n_past) + i;
      int64_t first_key = a.sliding_window > 0 ? std::max<int64_t>(0, pos - a.sliding_window + 1) : 0;
      // The group's query heads are adjacent: heads [kv_head·group, (kv_head+1)·group).
      const float* q = a.q + row * a.q_stride + int64_t(task.kv_head) * group * a.head_dim;
      float* out = a.out + row * a.out_stride + int64_t(task.kv_head) * group * a.head_dim;
      attend_group<T>(a, seq, task.kv_head, group, q, first_key, pos, scores, acc, out);
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
