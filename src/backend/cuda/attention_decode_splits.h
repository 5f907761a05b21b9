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

struct DecodeSplits {
  int splits;          // CTAs per (row, KV head), each a share of the row's keys
  bool cluster_merge;  // the splits merge in their thread block cluster, not in a combine kernel
};

// The split of a launch whose rows of a sequence number `covered_rows`, the
// longest with `max_keys` keys, on the tensor-core kernel when `mma`.
DecodeSplits decode_splits(int covered_rows, int n_kv_heads, int head_dim, int max_keys, bool mma);

}  // namespace brioche::cuda
