// Memory another op reads soon after a matmul (a served adapter's factors
// after the base projection), requested by the matmul's kernels a few cache
// lines per weight block while its dot products run, so the bytes arrive
// under that compute instead of stalling the op that reads them. Only
// requests: the bytes are never read (prefetches do not fault), and the
// results are the same with or without them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace brioche::cpu {

struct ByteRange {
  const void* data = nullptr;
  size_t bytes = 0;
};

// The cache lines of `range`: from the one holding its first byte to the
// one holding its last (none for an empty range).
inline int64_t range_lines(const ByteRange& range) {
  if (range.bytes == 0) return 0;
  const auto first = reinterpret_cast<uintptr_t>(range.data) / 64;
  const auto last = (reinterpret_cast<uintptr_t>(range.data) + range.bytes - 1) / 64;
  return int64_t(last - first + 1);
}

inline int64_t range_lines(std::span<const ByteRange> ranges) {
  int64_t lines = 0;
  for (const ByteRange& r : ranges) lines += range_lines(r);
  return lines;
}

// Lines [first, first + count) of the ranges' lines one after the other: a
// job's share of a matmul's read-ahead (its tiles' share of all tiles).
struct ReadAheadLines {
  const ByteRange* ranges = nullptr;
  int32_t n_ranges = 0;
  int64_t first = 0, count = 0;

  // The lines of rows [r0, r1) of a job of rows [row_begin, row_end): in
  // proportion to rows, so consecutive tiles take consecutive shares that
  // add up to `count`.
  int64_t share(int64_t row_begin, int64_t row_end, int64_t r0, int64_t r1) const {
    const int64_t rows = row_end - row_begin;
    return (r1 - row_begin) * count / rows - (r0 - row_begin) * count / rows;
  }
};

// Walks a job's lines in order: next() gives the address of the next line
// (nullptr past the last), fetch() requests it into L2 (prefetcht1): into
// L1 the read-ahead (100–300 KB a call) evicts the matmul's own working set
// (its activations and decoded tile), which cost the projection as much as
// the read-ahead saved the adapters (bench/lora_rows_bench.cpp,
// BM_LoraStepAfterBaseProjection).
class ReadAheadCursor {
 public:
  explicit ReadAheadCursor(const ReadAheadLines& lines)
      : range_(lines.ranges), end_(lines.ranges + lines.n_ranges), left_(lines.count) {
    int64_t skip = lines.first;
    for (; range_ < end_; ++range_) {
      start_range();
      const int64_t n = (range_end_ - next_) / 64;
      if (skip < n) break;
      skip -= n;
    }
    if (range_ == end_) left_ = 0;
    next_ += 64 * skip;
  }
  const char* next() {
    if (left_ == 0) return nullptr;
    --left_;
    const char* line = next_;
    next_ += 64;
    while (next_ == range_end_ && ++range_ < end_) start_range();
    return line;
  }
  void fetch() {
    if (const char* line = next()) __builtin_prefetch(line, 0, 2);
  }

 private:
  // next_ and range_end_ at the first and past the last line of *range_.
  void start_range() {
    const auto data = reinterpret_cast<uintptr_t>(range_->data);
    next_ = reinterpret_cast<const char*>(data / 64 * 64);
    range_end_ = next_ + 64 * range_lines(*range_);
  }
  const ByteRange* range_;
  const ByteRange* end_;
  const char* next_ = nullptr;
  const char* range_end_ = nullptr;
  int64_t left_ = 0;
};

}  // namespace brioche::cpu
