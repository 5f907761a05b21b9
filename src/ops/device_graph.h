// Decode steps recorded once and replayed with one launch (CUDA graphs, see
// backend/cuda/graph.h), for layers above ops that must not include CUDA
// headers. In the CPU build every call is an error that says so.
#pragma once

#include <functional>
#include <memory>

#include "core/tensor.h"

namespace brioche::ops {

// Device-resident per-step inputs of a recorded decode step: row r is a
// token at its position with its sequence's block table; position −1 marks
// a padding row. Row r is sequence r's one new token unless
// rows_share_sequences (a verify step: a sequence's rows are consecutive, at
// consecutive positions; backend/cuda/graph.h).
struct DecodeInputs {
  Tensor tokens;     // i32 [n_rows]
  Tensor positions;  // i32 [n_rows]
  Tensor tables;     // i32 [n_rows, table_stride] block tables
  // i32 [n_rows, table_stride]: the window pool's block tables (the layers
  // KvCache::windowed read through them, under ScopedWindowTables); undefined
  // when the cache has no window pool.
  Tensor window_tables;
  int max_keys = 0;  // bound on position + 1 while the graph is used
  bool rows_share_sequences = false;
};

class DecodeGraph {
 public:
  DecodeGraph();
  ~DecodeGraph();
  DecodeGraph(DecodeGraph&&) noexcept;
  DecodeGraph& operator=(DecodeGraph&&) noexcept;

  // Records the device work of `record` (a forward over inputs' rows) with
  // ids, positions and block tables read from `inputs` instead of the host
  // spans passed to the ops. Nothing runs until launch().
  void capture(const DecodeInputs& inputs, const std::function<void()>& record);
  // Runs `record` now, reading the same device inputs: the first step of a
  // shape, which also checks every launch and initialises libraries (cuBLASLt)
  // before a capture records them.
  static void run_eagerly(const DecodeInputs& inputs, const std::function<void()>& record);
  // Replays the recorded step over the current contents of the inputs.
  void launch();
  bool empty() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// While alive, and a decode step is bound (run_eagerly, capture), the
// kernels of that step read block tables from its inputs' window_tables
// instead of tables: the attention of a layer whose K/V live in the window
// pool (Gemma 4's sliding layers). Outside a bound step it does nothing,
// and so it does when `on` is false.
class ScopedWindowTables {
 public:
  explicit ScopedWindowTables(bool on);
  ~ScopedWindowTables();
  ScopedWindowTables(const ScopedWindowTables&) = delete;
  ScopedWindowTables& operator=(const ScopedWindowTables&) = delete;

 private:
  bool swapped_ = false;
};

// False when BRIOCHE_CUDA_GRAPHS=0 (eager decode, for comparison and
// debugging) or the build has no CUDA backend.
bool decode_graphs_enabled();

}  // namespace brioche::ops
