// How the decode attention kernels split a launch's keys over CTAs, and how
// the splits merge. This header is the host-side rule, for the dispatch
// (attention.cu) and the tests.
//
// Plain C++ (no CUDA headers); the kernels exist when BRIOCHE_CUDA=ON.
#pragma once

namespace brioche::cuda {

struct DecodeSplits {
  int splits;          // CTAs per (row, KV head), each a share of the row's keys
  bool cluster_merge;  // the splits merge in their thread block cluster, not in a combine kernel
};

// The split of a launch whose rows of a sequence number `covered_rows`, the
// longest with `max_keys` keys, on the tensor-core kernel when `mma`.
DecodeSplits decode_splits(int covered_rows, int n_kv_heads, int head_dim, int max_keys, bool mma);

}  // namespace brioche::cuda
