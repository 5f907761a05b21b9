// CPU paged attention kernels (see ops/attention.h for the semantics).
#pragma once

#include <cstdint>

namespace brioche::backend::cpu {

struct KvSequence {
  int32_t first_row, n_rows, n_past;
  const int32_t* block_table;  // [n_table_blocks]
  int32_t n_table_blocks;
};

struct KvCacheLayer {
  void* k;   // [n_blocks, block_size, n_kv_heads, head_dim]
  void* v;   // same
  bool f16;  // element type: f16 when true, else f32
  int n_blocks, block_size;
};

struct StoreKvArgs {
  const float* k;  // [n_rows, n_kv_heads * head_dim], row stride k_stride floats
  const float* v;
  int64_t k_stride, v_stride;
  const KvSequence* sequences;
  int n_sequences;
  int kv_dim;  // n_kv_heads * head_dim
  KvCacheLayer cache;
};

void store_kv(const StoreKvArgs& args);

struct PagedAttentionArgs {
  const float* q;  // [n_rows, n_heads * head_dim], row stride q_stride floats
  float* out;      // [n_rows, n_heads * head_dim], row stride out_stride floats
  int64_t q_stride, out_stride;
  const KvSequence* sequences;
  int n_sequences;
  int n_heads, n_kv_heads, head_dim;
  float scale;
  int sliding_window;  // 0 = full causal
  KvCacheLayer cache;
};

void paged_attention(const PagedAttentionArgs& args);

}  // namespace brioche::backend::cpu
