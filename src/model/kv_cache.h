// Paged key/value cache: fixed-size blocks shared by all sequences.
//
// For every layer, K and V are tensors [n_blocks, block_size, n_kv_heads, head_dim]
// with that layer's shape (ModelConfig::kv_shape); a layer whose shape keeps
// no K/V has undefined tensors and takes no memory.
// Position p of a sequence lives in block block_table[p / block_size] at
// slot p % block_size (see forward_batch.h). The engine hands out block ids;
// this class only owns the memory.
//
// Window pool: with n_window_blocks > 0, the layers with a sliding window
// (KvLayerShape::window) keep their K/V in a second array of that many
// blocks, addressed by a second table (SequenceView::window_block_table),
// so that the engine can give back a sliding layer's blocks once they fall
// out of every window while the full layers keep theirs. With 0, every
// layer uses the one block array and table.
#pragma once

#include <cstddef>
#include <vector>

#include "core/tensor.h"
#include "model/model_config.h"

namespace brioche::model {

struct KvCacheOptions {
  int block_size = 16;
  int n_blocks = 0;
  DType dtype = DType::F32;     // F32 or F16
  Device device = Device::CPU;  // the model's device (Model::device())
  // Blocks of the window pool (see above); 0: none, sliding layers use the main blocks.
  int n_window_blocks = 0;
  // Per-sequence recurrent state slots (ModelConfig::state_layers; hybrid
  // models only): a running sequence holds one (SequenceView::state_slot).
  int n_state_slots = 0;
};

class KvCache {
 public:
  KvCache(const ModelConfig& config, KvCacheOptions options);

  int block_size() const { return options_.block_size; }
  int n_blocks() const { return options_.n_blocks; }
  DType dtype() const { return options_.dtype; }
  Device device() const { return options_.device; }
  int n_layers() const { return int(keys_.size()); }
  int n_window_blocks() const { return options_.n_window_blocks; }
  // Whether `layer`'s K/V lives in the window pool (read through window_block_table).
  bool windowed(int layer) const { return windowed_[size_t(layer)]; }
  size_t bytes() const;

  // [n_blocks, block_size, n_kv_heads, head_dim]; undefined for a layer without K/V
  Tensor& keys(int layer) { return keys_[layer]; }
  Tensor& values(int layer) { return values_[layer]; }
  const Tensor& keys(int layer) const { return keys_[layer]; }
  const Tensor& values(int layer) const { return values_[layer]; }

  // Recurrent state of a layer with ModelConfig::state_layers (f32,
  // undefined elsewhere): conv [n_state_slots, conv_kernel - 1,
  // conv_channels] (the last inputs, oldest first) and delta-rule
  // [n_state_slots, n_heads, key_dim, value_dim]. A slot's contents are those
  // of its sequence after its n_past tokens; the model starts a sequence at
  // n_past 0 from zeros.
  int n_state_slots() const { return options_.n_state_slots; }
  Tensor& conv_state(int layer) { return conv_states_[layer]; }
  Tensor& recurrent_state(int layer) { return recurrent_states_[layer]; }

  // Copies block `src` over block `dst` in every layer of the main pool
  // (copy-on-write of a shared prefix block before a sequence appends to it).
  void copy_block(int src, int dst);
  // Copies the first n_slots positions of block `src` into block `dst` in
  // every layer of the main pool (a sequence taking the leading tokens of a cached block that
  // it shares only partly; its own positions after them are written later).
  void copy_block_prefix(int src, int dst, int n_slots);
  // Copies state slot `src` over slot `dst` in every layer with state (a
  // snapshot of a sequence's recurrent state, or one restored from it).
  void copy_state_slot(int src, int dst);

  // Bytes one block takes over all layers, K and V (for sizing the cache):
  // the sum of the layers' own shapes.
  static size_t block_bytes(const ModelConfig& config, int block_size, DType dtype);
  // The part of block_bytes that the sliding-window layers take (what a
  // window-pool block costs); block_bytes minus it is a main-pool block's.
  static size_t window_block_bytes(const ModelConfig& config, int block_size, DType dtype);
  // The largest window among the layers with one (0: none).
  static int max_window(const ModelConfig& config);
  // Bytes one state slot takes over all layers (0 without state layers).
  static size_t state_slot_bytes(const ModelConfig& config);

 private:
  KvCacheOptions options_;
  std::vector<bool> windowed_;  // per layer
  std::vector<Tensor> keys_;
  std::vector<Tensor> values_;
  std::vector<Tensor> conv_states_;  // per layer; undefined without state
  std::vector<Tensor> recurrent_states_;
};

}  // namespace brioche::model
