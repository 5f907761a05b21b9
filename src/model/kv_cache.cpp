#include "model/kv_cache.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "ops/device.h"

namespace brioche::model {

KvCache::KvCache(const ModelConfig& config, KvCacheOptions options) : options_(options) {
  BRIOCHE_CHECK(options.block_size > 0 && options.n_blocks > 0, "KV cache: block_size ", options.block_size,
                " and n_blocks ", options.n_blocks, " must be positive");
  BRIOCHE_CHECK(options.dtype == DType::F32 || options.dtype == DType::F16, "KV cache: dtype must be f32 or f16, got ",
                dtype_name(options.dtype));
  BRIOCHE_CHECK(config.kv_layers.empty() || int(config.kv_layers.size()) == config.n_layers,
                "KV cache: ", config.kv_layers.size(), " per-layer shapes for a model of ", config.n_layers, " layers");
  BRIOCHE_CHECK(options.n_window_blocks >= 0, "KV cache: n_window_blocks ", options.n_window_blocks, " must be >= 0");
  for (int l = 0; l < config.n_layers; ++l) {
    const KvLayerShape shape = config.kv_shape(l);
    windowed_.push_back(options.n_window_blocks > 0 && shape.window > 0 && shape.n_kv_heads > 0);
    if (shape.n_kv_heads == 0) {
      keys_.emplace_back();
      values_.emplace_back();
      continue;
    }
    const int64_t blocks = windowed_.back() ? options.n_window_blocks : options.n_blocks;
    const std::initializer_list<int64_t> dims = {blocks, options.block_size, shape.n_kv_heads, shape.head_dim};
    keys_.push_back(ops::zeros(options.dtype, dims, options.device));
    values_.push_back(ops::zeros(options.dtype, dims, options.device));
  }
  BRIOCHE_CHECK(options.n_state_slots >= 0, "KV cache: n_state_slots ", options.n_state_slots, " must be >= 0");
  BRIOCHE_CHECK(config.state_layers.empty() || int(config.state_layers.size()) == config.n_layers,
                "KV cache: ", config.state_layers.size(), " per-layer state shapes for a model of ", config.n_layers,
                " layers");
  conv_states_.resize(size_t(config.n_layers));
  recurrent_states_.resize(size_t(config.n_layers));
  for (size_t l = 0; l < config.state_layers.size(); ++l) {
    const RecurrentStateShape& s = config.state_layers[l];
    if (s.conv_channels == 0 || options.n_state_slots == 0) continue;
    conv_states_[l] =
        ops::zeros(DType::F32, {options.n_state_slots, s.conv_kernel - 1, s.conv_channels}, options.device);
    recurrent_states_[l] =
        ops::zeros(DType::F32, {options.n_state_slots, s.n_heads, s.key_dim, s.value_dim}, options.device);
  }
}

size_t KvCache::bytes() const {
  size_t n = 0;
  for (size_t l = 0; l < keys_.size(); ++l)
    if (keys_[l].defined()) n += keys_[l].nbytes() + values_[l].nbytes();
  for (size_t l = 0; l < conv_states_.size(); ++l)
    if (conv_states_[l].defined()) n += conv_states_[l].nbytes() + recurrent_states_[l].nbytes();
  return n;
}

size_t KvCache::state_slot_bytes(const ModelConfig& config) {
  size_t floats = 0;
  for (const RecurrentStateShape& s : config.state_layers) floats += size_t(s.conv_floats() + s.recurrent_floats());
  return floats * sizeof(float);
}

size_t KvCache::block_bytes(const ModelConfig& config, int block_size, DType dtype) {
  size_t values_per_position = 0;
  for (int l = 0; l < config.n_layers; ++l) values_per_position += size_t(config.kv_shape(l).dim());
  return 2 * values_per_position * size_t(block_size) * size_t(dtype_info(dtype).block_bytes);
}

size_t KvCache::window_block_bytes(const ModelConfig& config, int block_size, DType dtype) {
  size_t values_per_position = 0;
  for (int l = 0; l < config.n_layers; ++l)
    if (config.kv_shape(l).window > 0) values_per_position += size_t(config.kv_shape(l).dim());
  return 2 * values_per_position * size_t(block_size) * size_t(dtype_info(dtype).block_bytes);
}

int KvCache::max_window(const ModelConfig& config) {
  int window = 0;
  for (int l = 0; l < config.n_layers; ++l)
    if (config.kv_shape(l).n_kv_heads > 0) window = std::max(window, config.kv_shape(l).window);
  return window;
}

void KvCache::copy_state_slot(int src, int dst) {
  BRIOCHE_CHECK(src >= 0 && src < n_state_slots() && dst >= 0 && dst < n_state_slots(), "KV cache: copy_state_slot(",
                src, ", ", dst, ") outside [0, ", n_state_slots(), ")");
  if (src == dst) return;
  for (size_t l = 0; l < conv_states_.size(); ++l) {
    if (!conv_states_[l].defined()) continue;
    for (Tensor* t : {&conv_states_[l], &recurrent_states_[l]}) {
      Tensor to = t->slice(0, dst, dst + 1);
      ops::copy(t->slice(0, src, src + 1), to);
    }
  }
}

void KvCache::copy_block(int src, int dst) { copy_block_prefix(src, dst, block_size()); }

void KvCache::copy_block_prefix(int src, int dst, int n_slots) {
  BRIOCHE_CHECK(src >= 0 && src < n_blocks() && dst >= 0 && dst < n_blocks(), "KV cache: copy_block(", src, ", ", dst,
                ") outside [0, ", n_blocks(), ")");
  BRIOCHE_CHECK(n_slots >= 0 && n_slots <= block_size(), "KV cache: copy of ", n_slots, " positions, expected 0..",
                block_size());
  if (src == dst || n_slots == 0) return;
  for (size_t l = 0; l < keys_.size(); ++l) {
    if (!keys_[l].defined() || windowed_[l]) continue;
    for (Tensor* t : {&keys_[l], &values_[l]}) {
      // [1, n_slots, n_kv_heads, head_dim]: contiguous, the block's leading positions
      Tensor to = t->slice(0, dst, dst + 1).slice(1, 0, n_slots);
      ops::copy(t->slice(0, src, src + 1).slice(1, 0, n_slots), to);
    }
  }
}

}  // namespace brioche::model
