#include "model/decode_graphs.h"

#include <algorithm>
#include <bit>

#include "core/env_switch.h"
#include "ops/device.h"

namespace brioche::model {

namespace {

// Rows a batch of n decode rows is padded to (0: too many for a graph).
// Exact up to 8 (the GEMV kernels are sized per row count), then steps of
// at most 50% so padding wastes little.
int bucket_rows(int n) {
  if (n <= 8) return n;
  for (int b : {12, 16, 24, 32, 48, 64, 96, 128, 192, 256})
    if (n <= b) return b;
  return 0;
}

}  // namespace

bool DecodeGraphs::is_graph_step(const ForwardBatch& batch) {
  if (batch.n_rows() == 0) return false;
  int32_t next_row = 0;
  for (const SequenceView& s : batch.sequences) {
    if (s.n_rows < 1 || s.n_rows > kMaxRowsPerSequence || s.first_row != next_row) return false;
    next_row += s.n_rows;
  }
  return next_row == batch.n_rows() &&
         std::all_of(batch.wants_logits.begin(), batch.wants_logits.end(), [](uint8_t w) { return w != 0; });
}

size_t DecodeGraphs::n_graphs() const {
  return size_t(std::count_if(buckets_.begin(), buckets_.end(), [](const auto& b) { return !b.second.graph.empty(); }));
}

void DecodeGraphs::clear() {
  buckets_.clear();
  cache_addresses_.clear();
}

ForwardBatch DecodeGraphs::padded(std::span<const int32_t> inputs, int rows, int width, bool windowed) {
  const int32_t* tokens = inputs.data();
  const int32_t* positions = tokens + rows;
  const int32_t* tables = positions + rows;
  const int32_t* window_tables = tables + size_t(rows) * width;
  ForwardBatch b;
  for (int r = 0; r < rows; ++r) {
    // Padding rows (position −1 on the device) pose as a fresh sequence in
    // block 0 for the host-side checks; the kernels skip them.
    const int32_t n_past = std::max(positions[r], 0);
    b.tokens.push_back(tokens[r]);
    b.positions.push_back(n_past);
    b.wants_logits.push_back(1);
    b.sequences.push_back({.first_row = r,
                           .n_rows = 1,
                           .n_past = n_past,
                           .block_table = std::span<const int32_t>(tables + size_t(r) * width, size_t(width))});
    if (windowed)
      b.sequences.back().window_block_table =
          std::span<const int32_t>(window_tables + size_t(r) * width, size_t(width));
  }
  return b;
}

bool DecodeGraphs::run(const ForwardBatch& batch, const KvCache& cache, Tensor& logits, const Forward& forward,
                       const Tensor* device_tokens) {
  if (cache.device() != Device::CUDA || !ops::decode_graphs_enabled() || !is_graph_step(batch)) return false;
  const int n = batch.n_rows();
  const bool shared = size_t(n) != batch.sequences.size();                        // a verify step: rows of one sequence
  static const bool verify_graphs = env_switch_on("BRIOCHE_CUDA_GRAPHS_VERIFY");  // =0: eager (A/B runs)
  if (shared && !verify_graphs) return false;
  const int rank_cap = adapter_rank_cap(batch);
  const int rows = bucket_rows(n);
  if (rows == 0) return false;
  const int block_size = cache.block_size();
  int needed = 1;  // blocks of the longest sequence after this step
  for (const SequenceView& s : batch.sequences)
    needed = std::max(needed, (s.n_past + s.n_rows + block_size - 1) / block_size);
  const int width = std::max(4, int(std::bit_ceil(unsigned(needed))));
  const bool windowed = cache.n_window_blocks() > 0;
  if (windowed && std::any_of(batch.sequences.begin(), batch.sequences.end(),
                              [](const SequenceView& s) { return s.window_block_table.empty(); }))
    return false;  // (the eager forward says what is missing)

  std::vector<const void*> addresses;
  for (int l = 0; l < cache.n_layers(); ++l) {
    // (KV-shared layers have no tensors.)
    addresses.push_back(cache.keys(l).defined() ? cache.keys(l).data() : nullptr);
    addresses.push_back(cache.values(l).defined() ? cache.values(l).data() : nullptr);
  }
  if (addresses != cache_addresses_) {
    buckets_.clear();
    cache_addresses_ = std::move(addresses);
  }
  if (device_tokens != nullptr) {
    // Recording runs the step eagerly first; a step fed from the device is
    // queued behind work the host has not waited for, so it only replays.
    auto recorded = buckets_.find({rows, width, rank_cap, shared});
    if (recorded == buckets_.end() || recorded->second.graph.empty()) return false;
  }

  // This step's inputs: tokens | positions (−1 for padding) | block tables
  // | window-pool tables (when windowed).
  const size_t n_inputs = size_t(rows) * size_t(2 + width * (windowed ? 2 : 1));
  const std::span<int32_t> inputs = staging_.fill(n_inputs);
  std::fill(inputs.begin(), inputs.end(), 0);
  int32_t* tokens = inputs.data();
  int32_t* positions = tokens + rows;
  int32_t* tables = positions + rows;
  int32_t* window_tables = tables + size_t(rows) * width;
  std::fill(positions, positions + rows, -1);
  for (const SequenceView& s : batch.sequences) {
    const size_t copied = std::min(s.block_table.size(), size_t(width));
    const size_t window_copied = std::min(s.window_block_table.size(), size_t(width));
    for (int i = 0; i < s.n_rows; ++i) {
      const int r = s.first_row + i;
      tokens[r] = batch.tokens[size_t(r)];
      positions[r] = s.n_past + i;
      std::copy_n(s.block_table.begin(), copied, tables + size_t(r) * width);
      if (windowed) std::copy_n(s.window_block_table.begin(), window_copied, window_tables + size_t(r) * width);
    }
  }

  auto [it, fresh] = buckets_.try_emplace({rows, width, rank_cap, shared});
  Bucket& b = it->second;
  if (fresh) {
    b.input_block = ops::zeros(DType::I32, {int64_t(n_inputs)}, Device::CUDA);
    b.inputs = {.tokens = b.input_block.slice(0, 0, rows),
                .positions = b.input_block.slice(0, rows, 2 * rows),
                .tables = b.input_block.slice(0, 2 * rows, int64_t(2 + width) * rows).reshape({rows, width}),
                .window_tables =
                    windowed
                        ? b.input_block.slice(0, int64_t(2 + width) * rows, int64_t(n_inputs)).reshape({rows, width})
                        : Tensor(),
                .max_keys = width * block_size,
                .rows_share_sequences = shared};
    b.logits = ops::zeros(DType::F32, {rows, config_.vocab_size}, Device::CUDA);
    if (rank_cap > 0) {
      b.adapter_block =
          ops::zeros(DType::I32, {int64_t(adapter_table_words(rows, rows, config_.n_layers))}, Device::CUDA);
      const Tensor u = ops::zeros(DType::F32, {rows, 3 * rank_cap}, Device::CUDA);
      b.adapters = adapter_table_views(b.adapter_block, rows, rows, config_.n_layers, rank_cap, u);
    }
  }
  staging_.upload(b.input_block);
  if (rank_cap > 0) {
    fill_adapter_table(batch, rows, rows, config_.n_layers, adapter_staging_.fill(size_t(b.adapter_block.dim(0))));
    adapter_staging_.upload(b.adapter_block);
  }
  if (device_tokens != nullptr) {
    Tensor tokens_in = b.inputs.tokens.slice(0, 0, n);
    ops::copy(*device_tokens, tokens_in);
  }

  if (b.graph.empty()) {
    const ForwardBatch pb = padded(inputs, rows, width, windowed);
    Activations a = block_activations_ ? b.buffers.view(config_, rows, Device::CUDA) : Activations{};
    auto record = [&] { forward(pb, a, b.logits, rank_cap > 0 ? &b.adapters : nullptr); };
    ops::DecodeGraph::run_eagerly(b.inputs, record);
    b.graph.capture(b.inputs, record);
  } else {
    b.graph.launch();
  }
  Tensor out = b.logits.slice(0, 0, n);
  ops::copy(out, logits);
  return true;
}

}  // namespace brioche::model
