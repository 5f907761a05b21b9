// The read-ahead of a matmul (backend/cpu/read_ahead.h): a call's lines are
// split over its tiles as matmul.cpp and the kernels split them (tiles of
// all parts numbered in turn, a task's tiles, then a job's rows by share),
// and every line of every range must be requested exactly once, in order,
// whatever the split.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "backend/cpu/read_ahead.h"

namespace brioche::cpu {
namespace {

// The lines of `ranges`, one after the other, as addresses.
std::vector<const char*> expected_lines(std::span<const ByteRange> ranges) {
  std::vector<const char*> lines;
  for (const ByteRange& r : ranges) {
    const auto first = reinterpret_cast<uintptr_t>(r.data) / 64 * 64;
    for (int64_t i = 0; i < range_lines(r); ++i) lines.push_back(reinterpret_cast<const char*>(first + 64 * i));
  }
  return lines;
}

struct Split {
  std::vector<int64_t> part_rows;  // weight rows of each part
  int tile_rows;                   // rows of a task's tile
  int64_t grain_tiles;             // tiles a task takes
  int kernel_tile_rows;            // rows a kernel's tile takes (then single rows, as quant_columns)
};

// The lines a split requests, in the order its tasks and tiles take them.
std::vector<const char*> requested_lines(std::span<const ByteRange> ranges, const Split& s) {
  std::vector<int64_t> first_tile = {0};
  for (int64_t m : s.part_rows) first_tile.push_back(first_tile.back() + (m + s.tile_rows - 1) / s.tile_rows);
  const int64_t n_tiles = first_tile.back(), lines = range_lines(ranges);
  std::vector<const char*> got;
  for (int64_t t0 = 0; t0 < n_tiles; t0 += s.grain_tiles) {
    const int64_t t1 = std::min(n_tiles, t0 + s.grain_tiles);
    for (size_t p = 0; p < s.part_rows.size(); ++p) {
      const int64_t begin = std::max(t0, first_tile[p]), end = std::min(t1, first_tile[p + 1]);
      if (begin >= end) continue;
      const int64_t row_begin = (begin - first_tile[p]) * s.tile_rows;
      const int64_t row_end = std::min(s.part_rows[p], (end - first_tile[p]) * s.tile_rows);
      const ReadAheadLines job{.ranges = ranges.data(),
                               .n_ranges = int32_t(ranges.size()),
                               .first = begin * lines / n_tiles,
                               .count = end * lines / n_tiles - begin * lines / n_tiles};
      ReadAheadCursor cursor(job);
      int64_t r0 = row_begin;
      const auto tile = [&](int64_t rows) {
        for (int64_t i = 0, n = job.share(row_begin, row_end, r0, r0 + rows); i < n; ++i) {
          const char* line = cursor.next();
          ASSERT_NE(line, nullptr) << "a tile's share runs past the job's lines";
          got.push_back(line);
        }
        r0 += rows;
      };
      while (r0 + s.kernel_tile_rows <= row_end) tile(s.kernel_tile_rows);
      while (r0 < row_end) tile(1);
      EXPECT_EQ(cursor.next(), nullptr) << "lines of the job left unrequested";
    }
  }
  return got;
}

TEST(ReadAhead, EveryLineOfEveryRangeIsRequestedOnceInOrderWhateverTheSplit) {
  alignas(64) static char buffer[64 * 200];
  const ByteRange ranges[] = {
      {.data = buffer + 10, .bytes = 100},          // unaligned, 2 lines
      {.data = buffer + 500, .bytes = 0},           // empty: no line
      {.data = buffer + 64 * 3 + 63, .bytes = 1},   // the last byte of a line
      {.data = buffer + 64 * 4, .bytes = 640},      // aligned, 10 lines
      {.data = buffer + 64 * 14 + 8, .bytes = 56},  // meets the next range inside a line
      {.data = buffer + 64 * 15, .bytes = 64 * 100 + 1},
  };
  const std::vector<const char*> want = expected_lines(ranges);
  ASSERT_EQ(int64_t(want.size()), range_lines(ranges));
  ASSERT_EQ(want.size(), 2u + 0u + 1u + 10u + 1u + 101u);
  const Split splits[] = {
      {.part_rows = {960}, .tile_rows = 12, .grain_tiles = 1, .kernel_tile_rows = 12},
      {.part_rows = {576, 192, 192}, .tile_rows = 12, .grain_tiles = 7, .kernel_tile_rows = 12},
      {.part_rows = {1536, 1536}, .tile_rows = 12, .grain_tiles = 300, .kernel_tile_rows = 12},
      {.part_rows = {21, 70, 5}, .tile_rows = 8, .grain_tiles = 3, .kernel_tile_rows = 8},
      {.part_rows = {23, 9}, .tile_rows = 4, .grain_tiles = 2, .kernel_tile_rows = 3},  // ragged tails
      {.part_rows = {3}, .tile_rows = 12, .grain_tiles = 1, .kernel_tile_rows = 12},    // fewer rows than lines
  };
  for (const Split& s : splits) {
    SCOPED_TRACE(::testing::Message() << "parts " << s.part_rows.size() << ", tile " << s.tile_rows << ", grain "
                                      << s.grain_tiles << ", kernel tile " << s.kernel_tile_rows);
    EXPECT_EQ(requested_lines(ranges, s), want);
  }
}

TEST(ReadAhead, NoRangesRequestNothing) {
  const ReadAheadLines none{};
  ReadAheadCursor cursor(none);
  EXPECT_EQ(cursor.next(), nullptr);
  EXPECT_EQ(none.share(0, 12, 0, 12), 0);
}

}  // namespace
}  // namespace brioche::cpu
