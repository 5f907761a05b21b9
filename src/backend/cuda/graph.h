// CUDA graphs: device work recorded once and replayed with one launch, so a
// decode step of a few hundred small kernels costs one launch of host time.
//
// A replay repeats the recorded kernels with the recorded arguments. What
// changes from step to step (token ids, positions, block tables) must
// therefore live in device arrays that the kernels read: DecodeBinding names
// them, and while it is bound the launchers that need such metadata read it
// there instead of uploading the host values of the call.
//
// Plain C++ (no CUDA headers); implemented in graph.cu.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

namespace brioche::cuda {

// Per-step inputs of a decode batch in device memory. Row r is a token at
// its position, reading the keys at positions [0, position] through its own
// block table; a row whose position is −1 is padding: its K/V are not
// stored and its attention output is not written (its other values are
// computed and ignored). In a decode step row r is sequence r's one new
// token; in a verify step (rows_share_sequences) the k + 1 rows of one
// sequence are consecutive rows at consecutive positions with copies of its
// table, so every row's K/V must be stored before any row attends.
struct DecodeBinding {
  const int32_t* tokens = nullptr;     // [n_rows]
  const int32_t* positions = nullptr;  // [n_rows] = the sequence's n_past, or −1
  const int32_t* tables = nullptr;     // [n_rows, table_stride] block tables
  int n_rows = 0;
  int table_stride = 0;
  int max_keys = 0;  // bound on positions + 1 over the graph's life (sizes attention splits)
  bool rows_share_sequences = false;
};

// The binding the launchers on this thread read (nullptr: none).
const DecodeBinding* decode_binding();

// Binds `binding` for the scope's lifetime (one at a time).
class ScopedDecodeBinding {
 public:
  explicit ScopedDecodeBinding(const DecodeBinding& binding);
  ~ScopedDecodeBinding();
  ScopedDecodeBinding(const ScopedDecodeBinding&) = delete;
  ScopedDecodeBinding& operator=(const ScopedDecodeBinding&) = delete;
};

class Graph {
 public:
  Graph();
  ~Graph();
  Graph(Graph&&) noexcept;
  Graph& operator=(Graph&&) noexcept;

  // Records the work `record` queues on the brioche stream (nothing runs).
  // Scratch memory allocated inside stays the graph's until it is destroyed.
  // An exception inside `record` ends the recording and leaves the graph empty.
  void capture(const std::function<void()>& record);
  // Queues one replay on the brioche stream.
  void launch();
  bool empty() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace brioche::cuda
