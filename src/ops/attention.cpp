#include "ops/attention.h"

#include <algorithm>
#include <vector>

#include "backend/cpu/attention.h"
#include "ops/check_f32.h"
#include "ops/device.h"
#include "ops/fused_matmul.h"
#include "ops/matmul_args.h"
#include "ops/rope_args.h"
#if BRIOCHE_CUDA
#include "backend/cuda/kernels.h"
#endif

namespace brioche::ops {

namespace {

backend::cpu::KvCacheLayer cache_layer(const Tensor& k_cache, const Tensor& v_cache, int n_kv_heads, int head_dim,
                                       const char* op) {
  BRIOCHE_CHECK(k_cache.rank() == 4 && v_cache.rank() == 4, op,
                ": caches must be [n_blocks, block_size, n_kv_heads, head_dim], got ", k_cache.describe(), " and ",
                v_cache.describe());
  BRIOCHE_CHECK(k_cache.shape() == v_cache.shape() && k_cache.dtype() == v_cache.dtype(), op, ": K cache ",
                k_cache.describe(), " and V cache ", v_cache.describe(), " differ");
  BRIOCHE_CHECK(k_cache.dtype() == DType::F32 || k_cache.dtype() == DType::F16, op,
                ": cache dtype must be f32 or f16, got ", k_cache.describe());
  BRIOCHE_CHECK(k_cache.is_contiguous() && v_cache.is_contiguous(), op, ": caches must be contiguous");
  BRIOCHE_CHECK(k_cache.dim(2) == n_kv_heads && k_cache.dim(3) == head_dim, op, ": cache ", k_cache.describe(),
                " does not hold ", n_kv_heads, " heads of ", head_dim);
  return {.k = k_cache.data(),
          .v = v_cache.data(),
          .f16 = k_cache.dtype() == DType::F16,
          .n_blocks = int(k_cache.dim(0)),
          .block_size = int(k_cache.dim(1))};
}

// Checks every sequence's rows and block table and converts them. Only the
// entries the op touches must be blocks: a store writes positions from
// n_past on (first_key = kStoreOnly); attention reads from the first key in
// a row's window (sliding_window > 0), or from 0. The engine gives back the
// window pool's blocks before that (-1 entries: KvCache's window pool).
constexpr int kStoreOnly = -1;
std::vector<backend::cpu::KvSequence> kv_sequences(std::span<const AttentionSequence> sequences, int64_t n_rows,
                                                   const backend::cpu::KvCacheLayer& cache, const char* op,
                                                   int window) {
  std::vector<backend::cpu::KvSequence> out;
  out.reserve(sequences.size());
  for (size_t s = 0; s < sequences.size(); ++s) {
    const AttentionSequence& seq = sequences[s];
    BRIOCHE_CHECK(seq.first_row >= 0 && seq.n_rows >= 0 && seq.first_row + int64_t(seq.n_rows) <= n_rows, op,
                  ": sequence ", s, " rows [", seq.first_row, ", ", seq.first_row + seq.n_rows,
                  ") outside the batch of ", n_rows, " rows");
    BRIOCHE_CHECK(seq.n_past >= 0, op, ": sequence ", s, " has n_past ", seq.n_past);
    int64_t positions = int64_t(seq.n_past) + seq.n_rows;
    int64_t needed = (positions + cache.block_size - 1) / cache.block_size;
    BRIOCHE_CHECK(int64_t(seq.block_table.size()) >= needed, op, ": sequence ", s, " needs ", needed, " blocks for ",
                  positions, " positions, its block table has ", seq.block_table.size());
    const int64_t first_key = window == kStoreOnly ? seq.n_past
                              : window > 0         ? std::max<int64_t>(0, int64_t(seq.n_past) - window + 1)
                                                   : 0;
    for (int64_t b = first_key / cache.block_size; b < needed; ++b) {
      int32_t id = seq.block_table[b];
      BRIOCHE_CHECK(id >= 0 && id < cache.n_blocks, op, ": sequence ", s, " block table entry ", b, " is ", id,
                    ", the cache has ", cache.n_blocks, " blocks");
    }
    out.push_back({seq.first_row, seq.n_rows, seq.n_past, seq.block_table.data(), int32_t(seq.block_table.size())});
  }
  return out;
}

// The checked arguments of a store_kv call; `seqs` holds the converted
// sequences the arguments point to.
backend::cpu::StoreKvArgs store_kv_args(const Tensor& k, const Tensor& v, std::span<const AttentionSequence> sequences,
                                        Tensor& k_cache, Tensor& v_cache, std::vector<backend::cpu::KvSequence>& seqs) {
  auto kr = detail::f32_rows(k, "store_kv", "k");
  auto vr = detail::f32_rows(v, "store_kv", "v");
  BRIOCHE_CHECK(kr.n_rows == vr.n_rows && kr.dim == vr.dim, "store_kv: k ", k.describe(), " and v ", v.describe(),
                " differ");
  int n_kv_heads = int(k_cache.rank() == 4 ? k_cache.dim(2) : 0);
  int head_dim = int(k_cache.rank() == 4 ? k_cache.dim(3) : 0);
  auto cache = cache_layer(k_cache, v_cache, n_kv_heads, head_dim, "store_kv");
  BRIOCHE_CHECK(kr.dim == int64_t(n_kv_heads) * head_dim, "store_kv: k rows have ", kr.dim, " values, the cache holds ",
                n_kv_heads, " x ", head_dim);
  seqs = kv_sequences(sequences, kr.n_rows, cache, "store_kv", kStoreOnly);
  return {.k = kr.data,
          .v = vr.data,
          .k_stride = kr.stride,
          .v_stride = vr.stride,
          .sequences = seqs.data(),
          .n_sequences = int(seqs.size()),
          .kv_dim = int(kr.dim),
          .cache = cache};
}

}  // namespace

void store_kv(const Tensor& k, const Tensor& v, std::span<const AttentionSequence> sequences, Tensor& k_cache,
              Tensor& v_cache) {
  k_cache.note_written();
  v_cache.note_written();
  std::vector<backend::cpu::KvSequence> seqs;
  const backend::cpu::StoreKvArgs args = store_kv_args(k, v, sequences, k_cache, v_cache, seqs);
  if (detail::common_device("store_kv", {&k, &v, &k_cache, &v_cache}) == Device::CUDA) {
#if BRIOCHE_CUDA
    return cuda::store_kv(args);
#else
    detail::fail_no_cuda("store_kv");
#endif
  }
  backend::cpu::store_kv(args);
}

namespace {

// The checked arguments of a paged_attention call; `seqs` holds the
// converted sequences they point to.
backend::cpu::PagedAttentionArgs attention_args(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                                std::span<const AttentionSequence> sequences, const AttentionParams& p,
                                                Tensor& out, std::vector<backend::cpu::KvSequence>& seqs) {
  auto qr = detail::f32_rows(q, "paged_attention", "q");
  auto orows = detail::f32_rows(out, "paged_attention", "out");
  BRIOCHE_CHECK(p.n_heads > 0 && p.n_kv_heads > 0 && p.n_heads % p.n_kv_heads == 0, "paged_attention: n_heads ",
                p.n_heads, " must be a multiple of n_kv_heads ", p.n_kv_heads);
  BRIOCHE_CHECK(qr.dim == int64_t(p.n_heads) * p.head_dim, "paged_attention: q must be [n, ", p.n_heads, " * ",
                p.head_dim, "], got ", q.describe());
  BRIOCHE_CHECK(orows.n_rows == qr.n_rows && orows.dim == qr.dim, "paged_attention: out ", out.describe(),
                " does not match q ", q.describe());
  auto cache = cache_layer(k_cache, v_cache, p.n_kv_heads, p.head_dim, "paged_attention");
  seqs = kv_sequences(sequences, qr.n_rows, cache, "paged_attention", p.sliding_window);
  return {.q = qr.data,
          .out = orows.data,
          .q_stride = qr.stride,
          .out_stride = orows.stride,
          .sequences = seqs.data(),
          .n_sequences = int(seqs.size()),
          .n_heads = p.n_heads,
          .n_kv_heads = p.n_kv_heads,
          .head_dim = p.head_dim,
          .scale = p.scale,
          .sliding_window = p.sliding_window,
          .cache = cache};
}

// k's RoPE parameters: q's, over the cache's KV heads.
RopeParams k_rope_of(const RopeParams& q_rope, const Tensor& k_cache) {
  BRIOCHE_CHECK(k_cache.rank() == 4, "rope_store_kv: caches must be [n_blocks, block_size, n_kv_heads, ",
                "head_dim], got ", k_cache.describe());
  RopeParams k_rope = q_rope;
  k_rope.n_heads = int(k_cache.dim(2));
  return k_rope;
}

}  // namespace

void rope_store_kv(Tensor& q, const RopeStoreKvFirst& first, const PagedKvCache& cache) {
  auto& [k, v, positions, q_rope] = first;
  auto& [k_cache, v_cache, sequences] = cache;
  for (const Tensor* t : {&q, &k, &k_cache, &v_cache}) t->note_written();
  const RopeParams k_rope = k_rope_of(q_rope, k_cache);
  if (detail::common_device("rope_store_kv", {&q, &k, &v, &k_cache, &v_cache}) == Device::CUDA) {
#if BRIOCHE_CUDA
    std::vector<backend::cpu::KvSequence> seqs;
    const backend::cpu::RopeArgs q_args = detail::rope_args(q, positions, q_rope);
    const backend::cpu::RopeArgs k_args = detail::rope_args(k, positions, k_rope);
    return cuda::rope_store_kv(q_args, k_args, store_kv_args(k, v, sequences, k_cache, v_cache, seqs));
#else
    detail::fail_no_cuda("rope_store_kv");
#endif
  }
  rope(q, positions, q_rope);
  rope(k, positions, k_rope);
  store_kv(k, v, sequences, k_cache, v_cache);
}

void paged_attention(const Tensor& q, const PagedKvView& cache, const AttentionParams& p, Tensor& out) {
  auto& [k_cache, v_cache, sequences] = cache;
  out.note_written();
  std::vector<backend::cpu::KvSequence> seqs;
  const backend::cpu::PagedAttentionArgs args = attention_args(q, k_cache, v_cache, sequences, p, out, seqs);
  if (detail::common_device("paged_attention", {&q, &k_cache, &v_cache, &out}) == Device::CUDA) {
#if BRIOCHE_CUDA
    return cuda::paged_attention(args);
#else
    detail::fail_no_cuda("paged_attention");
#endif
  }
  backend::cpu::paged_attention(args);
}

namespace {

#if BRIOCHE_CUDA
// paged_attention(q, first, ...) on CUDA, its output to `out16` when set;
// with `projection`, matmul_accumulate(projection) after it, reading the
// int8 blocks the attention writes (cuda::rope_store_kv_attention_accumulate).
void rope_store_kv_attention_cuda(Tensor& q, const RopeStoreKvFirst& first, Tensor& k_cache, Tensor& v_cache,
                                  std::span<const AttentionSequence> sequences, const AttentionParams& p, Tensor& out,
                                  cuda::AttentionOut16 out16, const cpu::MatmulArgs* projection = nullptr,
                                  cuda::NormHandOn hand_on = {}) {
  const RopeParams k_rope = k_rope_of(first.q_rope, k_cache);
  std::vector<backend::cpu::KvSequence> store_seqs, attention_seqs;
  const backend::cpu::RopeArgs q_args = detail::rope_args(q, first.positions, first.q_rope);
  const backend::cpu::RopeArgs k_args = detail::rope_args(first.k, first.positions, k_rope);
  const backend::cpu::StoreKvArgs kv = store_kv_args(first.k, first.v, sequences, k_cache, v_cache, store_seqs);
  const backend::cpu::PagedAttentionArgs attention =
      attention_args(q, k_cache, v_cache, sequences, p, out, attention_seqs);
  if (projection != nullptr)
    return cuda::rope_store_kv_attention_accumulate(q_args, k_args, kv, attention, *projection, hand_on);
  cuda::rope_store_kv_attention(q_args, k_args, kv, attention, out16);
}
#endif

}  // namespace

void paged_attention(Tensor& q, const RopeStoreKvFirst& first, const PagedKvCache& cache, const AttentionParams& p,
                     Tensor& out) {
  auto& [k_cache, v_cache, sequences] = cache;
  if (detail::common_device("paged_attention", {&q, &first.k, &first.v, &k_cache, &v_cache, &out}) == Device::CUDA) {
    for (const Tensor* t : {&q, &first.k, &k_cache, &v_cache, &out}) t->note_written();
#if BRIOCHE_CUDA
    return rope_store_kv_attention_cuda(q, first, k_cache, v_cache, sequences, p, out, {});
#else
    detail::fail_no_cuda("paged_attention");
#endif
  }
  rope_store_kv(q, first, cache);
  paged_attention(q, cache, p, out);
}

void paged_attention(Tensor& q, const RopeStoreKvFirst& first, const PagedKvCache& cache, const AttentionParams& p,
                     const ProjectAccumulateThen& then) {
  [[maybe_unused]] auto& [k_cache, v_cache, sequences] = cache;  // (read only on CUDA)
  Tensor& out = then.x;
#if BRIOCHE_CUDA
  if (then.w.device() == Device::CUDA) {
    const cpu::MatmulArgs projection = detail::matmul_args(out, then.w, then.y, "paged_attention");
    const bool gemm16 = cuda::gemm_reads_16bit(projection);
    if (gemm16 || cuda::attention_quantizes_for(projection, p.head_dim)) {
      detail::common_device("paged_attention", {&q, &first.k, &first.v, &k_cache, &v_cache, &out, &then.y});
      for (const Tensor* t : {&q, &first.k, &k_cache, &v_cache, &out, &then.y}) t->note_written();
      HandOnWrite write(then.hand_on, then.y, "paged_attention");
      if (gemm16) {
        const bool f16 = then.w.dtype() == DType::F16;  // the rows an f16 weight's GEMM reads
        const Tensor out16 = uninitialized(f16 ? DType::F16 : DType::BF16, {out.dim(0), out.dim(1)}, Device::CUDA);
        rope_store_kv_attention_cuda(q, first, k_cache, v_cache, sequences, p, out, {.rows = out16.data(), .f16 = f16});
        cuda::matmul_accumulate_16bit(projection, out16.data());
      } else {
        rope_store_kv_attention_cuda(q, first, k_cache, v_cache, sequences, p, out, {}, &projection,
                                     {.norm_w = write.norm_w(), .handed = write.slot()});
      }
      return write.finish();
    }
  }
#endif
  paged_attention(q, first, cache, p, out);
  matmul_accumulate(out, then.w, then.y, then.scratch, {.hand_on = then.hand_on});
}

}  // namespace brioche::ops
