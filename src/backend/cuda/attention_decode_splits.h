// How the decode attention kernels split a launch's keys over CTAs, and how
// the splits merge. This header is the host-side rule, for the dispatch
// (attention.cu) and the tests.
//
// Plain C++ (no CUDA headers); the kernels exist when BRIOCHE_CUDA=ON.
#pragma once

#include "core/host_device.h"

namespace brioche::cuda {

// At most this many splits of a (row, KV head) are one thread block cluster
// (the H200's limit, with the kernels' consent to clusters over 8).
inline constexpr int kMaxClusterSplits = 16;

// How a cluster's splits merge (merge_in_cluster, attention_paged.cuh). The
// group's heads are `blocks` blocks of 32 output values. Block b belongs to
// active split b mod A (A = active_splits), and split s's partial of it goes
// to slot (b / A)·A + s of the owner's buffer: the owner's j-th block's
// partials are slots j·A .. j·A + A − 1.
struct ClusterMergeLayout {
  int blocks, active_splits;

  BRIOCHE_HOST_DEVICE constexpr int owner(int block) const { return block % active_splits; }
  BRIOCHE_HOST_DEVICE constexpr int slot(int block, int split) const {
    return block / active_splits * active_splits + split;
  }
  // The blocks split `split` owns (none when it is not active).
  BRIOCHE_HOST_DEVICE constexpr int owned_by(int split) const {
    return split < active_splits ? (blocks - split + active_splits - 1) / active_splits : 0;
  }
  // The j-th block split `split` owns (j < owned_by(split)), and the first of
  // its partials' slots, split 0's: slot(owned_block(s, j), 0) without a
  // division.
  BRIOCHE_HOST_DEVICE constexpr int owned_block(int split, int j) const { return j * active_splits + split; }
  BRIOCHE_HOST_DEVICE constexpr int owned_slots(int j) const { return j * active_splits; }
  // The slots a buffer needs for groups of up to max_blocks blocks: a slot
  // j·A + s is at most (max_blocks − 1) + (A − 1).
  static constexpr int slots_for(int max_blocks) { return max_blocks + kMaxClusterSplits - 1; }
};

// The fewest keys a split takes (one step of the CUDA-core kernel's 4 warps
// at head_dim 128).
inline constexpr int kMinSplitKeys = 16;

// Launches of at most this many rows split each row's keys by the row's own
// length (RowSplitRule), so a row's output has the same bits in every such
// launch, whatever the other rows, the row count, the graph bucket or the
// merge (cluster or combine kernel): a speculative verify row (one of a
// sequence's 1 + k rows) then equals the decode of that position. Below both
// the kernels' batch shapes (attention.cu's kBatchRows, the tensor-core
// kernel's kMmaMinRows), which sum keys in other orders.
inline constexpr int kRowExactRows = 7;

// How many splits a row of n_keys keys takes in a row-exact launch: what a
// lone row's decode graph gave it under the launch rule (decode_splits),
// as a function of the row alone. That launch was sized for the graph's
// bucket, the next power of two of at least 64 keys, B: one split per
// `short_keys` keys of B (two steps of the CTA's key slots) while that
// keeps them within a cluster, else one per kMinSplitKeys keys of B; and
// the row took at most one split per kMinSplitKeys of its own keys. At most
// `cap`, the splits that fill the GPU for a lone row. Non-decreasing in
// n_keys, so a launch sized for its longest row covers every row.
struct RowSplitRule {
  int cap = 0;  // 0: the launch's rule (DecodeSplits::splits bounds each row)
  int short_keys = kMinSplitKeys;

  BRIOCHE_HOST_DEVICE constexpr int splits(int n_keys) const {
    int bucket = 4 * kMinSplitKeys;
    while (bucket < n_keys) bucket *= 2;
    const int bucket_splits = bucket / (bucket <= kMaxClusterSplits * short_keys ? short_keys : kMinSplitKeys);
    int wanted = (n_keys + kMinSplitKeys - 1) / kMinSplitKeys;
    if (wanted > bucket_splits) wanted = bucket_splits;
    return wanted < 1 ? 1 : wanted < cap ? wanted : cap;
  }
};

struct DecodeSplits {
  int splits;          // CTAs per (row, KV head), each a share of the row's keys
  bool cluster_merge;  // the splits merge in their thread block cluster, not in a combine kernel
  RowSplitRule rows;   // set (cap > 0) when each row's split is its own
};

// The split of a launch of `launch_rows` rows (padding included), of which
// `covered_rows` belong to sequences, the longest with `max_keys` keys, on
// the tensor-core kernel when `mma`.
DecodeSplits decode_splits(int covered_rows, int launch_rows, int n_kv_heads, int head_dim, int max_keys, bool mma);

}  // namespace brioche::cuda
