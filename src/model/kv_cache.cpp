#include "model/kv_cache.h"

#include <cstring>

#include "core/error.h"
#include "ops/device.h"

namespace brioche::model {

KvCache::KvCache(const ModelConfig& config, KvCacheOptions options) : options_(options) {
  BRIOCHE_CHECK(options.block_size > 0 && options.n_blocks > 0, "KV cache: block_size ",
                options.block_size, " and n_blocks ", options.n_blocks, " must be positive");
  BRIOCHE_CHECK(options.dtype == DType::F32 || options.dtype == DType::F16,
                "KV cache: dtype must be f32 or f16, got ", dtype_name(options.dtype));
  for (int l = 0; l < config.n_layers; ++l) {
    keys_.push_back(ops::zeros(options.dtype, {options.n_blocks, options.block_size,
                                               config.n_kv_heads, config.head_dim}, options.device));
    values_.push_back(ops::zeros(options.dtype, {options.n_blocks, options.block_size,
                                                 config.n_kv_heads, config.head_dim}, options.device));
  }
}

size_t KvCache::bytes() const {
  size_t n = 0;
  for (size_t l = 0; l < keys_.size(); ++l) n += keys_[l].nbytes() + values_[l].nbytes();
  return n;
}

size_t KvCache::block_bytes(const ModelConfig& config, int block_size, DType dtype) {
  return 2 * size_t(config.n_layers) * size_t(block_size) * size_t(config.kv_dim()) *
         size_t(dtype_info(dtype).block_bytes);
}

void KvCache::copy_block(int src, int dst) { copy_block_prefix(src, dst, block_size()); }

void KvCache::copy_block_prefix(int src, int dst, int n_slots) {
  BRIOCHE_CHECK(src >= 0 && src < n_blocks() && dst >= 0 && dst < n_blocks(), "KV cache: copy_block(",
                src, ", ", dst, ") outside [0, ", n_blocks(), ")");
  BRIOCHE_CHECK(n_slots >= 0 && n_slots <= block_size(), "KV cache: copy of ", n_slots,
                " positions, expected 0..", block_size());
  if (src == dst || n_slots == 0) return;
  for (size_t l = 0; l < keys_.size(); ++l) {
    for (Tensor* t : {&keys_[l], &values_[l]}) {
      // [1, n_slots, n_kv_heads, head_dim]: contiguous, the block's leading positions
      Tensor to = t->slice(0, dst, dst + 1).slice(1, 0, n_slots);
      ops::copy(t->slice(0, src, src + 1).slice(1, 0, n_slots), to);
    }
  }
}

}  // namespace brioche::model
