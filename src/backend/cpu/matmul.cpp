#include "backend/cpu/matmul.h"

#include <algorithm>
#include <array>
#include <vector>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/matmul_kernels.h"
#include "backend/cpu/quant_act.h"
#include "backend/cpu/quant_ref.h"
#include "core/error.h"
#include "core/thread_pool.h"

namespace brioche::cpu {

namespace {

const MatmulKernels* kernels_for(Isa isa) {
  switch (isa) {
    case Isa::Avx2: return &matmul_kernels_avx2();
    case Isa::Avx512: return &matmul_kernels_avx512();
    case Isa::Avx512Vnni: return &matmul_kernels_avx512_vnni();
    case Isa::Scalar: return nullptr;
  }
  return nullptr;
}

// Splits the m weight rows over the pool. Each task gets a multiple of
// `tile_rows` rows and enough work (rows * n * k) to amortise dispatch.
template <typename Fn>
void for_row_ranges(int64_t m, int64_t n, int64_t k, int tile_rows, Fn&& fn) {
  ThreadPool& pool = ThreadPool::global();
  const int64_t work_per_row = std::max<int64_t>(1, n * k);
  const int64_t min_rows_for_work = (int64_t(1) << 16) / work_per_row + 1;
  int64_t grain = std::max<int64_t>(tile_rows, min_rows_for_work);
  grain = (grain + tile_rows - 1) / tile_rows * tile_rows;
  const int64_t tiles = (m + tile_rows - 1) / tile_rows;
  const int64_t grain_tiles = grain / tile_rows;
  pool.parallel_for(tiles, grain_tiles,
                    [&](int64_t t0, int64_t t1) { fn(t0 * tile_rows, std::min(m, t1 * tile_rows)); });
}

// Portable path: decode each weight row to f32 and dot in f32 (no activation
// quantization). Slow, but it is the reference the SIMD paths are held to.
void matmul_scalar(const MatmulArgs& a) {
  for_row_ranges(a.m, a.n, a.k, 1, [&](int64_t r0, int64_t r1) {
    std::vector<float> wrow(size_t(a.k));
    for (int64_t r = r0; r < r1; ++r) {
      dequantize_row_ref(a.wtype, static_cast<const uint8_t*>(a.w) + r * a.w_row_bytes, wrow.data(), a.k);
      for (int64_t c = 0; c < a.n; ++c) {
        const float* xr = a.x + c * a.ldx;
        float s = 0;
        for (int64_t i = 0; i < a.k; ++i) s += wrow[size_t(i)] * xr[i];
        a.y[c * a.ldy + r] = s;
      }
    }
  });
}

// Whether args name a matmul with a valid, non-empty shape (the checks of
// matmul()); a group falls back to matmul() per part otherwise, so the
// errors come from one place.
bool plain_quantized_shape(const MatmulArgs& a) {
  const auto info = dtype_info(a.wtype);
  return info.quantized && a.wtype != DType::I32 && a.n > 0 && a.m > 0 && a.k > 0 && a.k % info.block_elems == 0 &&
         a.w_row_bytes >= row_bytes(a.wtype, a.k);
}

constexpr size_t kMaxGroupParts = 8;  // Q/K/V and gate/up: 3 and 2; more run one matmul each

// Runs kernel(job for part p, rows [r0, r1)) over the weight rows of every
// part, in tiles of tile_rows, in one pool dispatch: the parts' tiles are
// numbered one after the other. A job that takes a read-ahead gets the
// lines of `read_ahead` in proportion to its tiles: tiles [t0, t1) of T
// request lines [t0·L/T, t1·L/T) of L.
template <typename Job, typename Kernel>
void run_group_tiles(std::span<const MatmulArgs> parts, std::span<const Job> jobs, int tile_rows, Kernel kernel,
                     std::span<const ByteRange> read_ahead = {}) {
  BRIOCHE_CHECK(!parts.empty() && parts.size() <= kMaxGroupParts, "matmul_group: ", parts.size(),
                " parts, expected 1 to ", kMaxGroupParts);
  std::array<int64_t, kMaxGroupParts + 1> first_tile{};  // running tile counts, [parts + 1] used
  int64_t work_per_row = 1;
  for (size_t p = 0; p < parts.size(); ++p) {
    first_tile[p + 1] = first_tile[p] + (parts[p].m + tile_rows - 1) / tile_rows;
    work_per_row = std::max<int64_t>(work_per_row, parts[p].n * parts[p].k);
  }
  const int64_t min_rows_for_work = (int64_t(1) << 16) / work_per_row + 1;
  const int64_t grain_tiles = std::max<int64_t>(1, (min_rows_for_work + tile_rows - 1) / tile_rows);
  const int64_t read_ahead_lines = range_lines(read_ahead);
  const int64_t n_tiles = first_tile[parts.size()];
  ThreadPool::global().parallel_for(first_tile[parts.size()], grain_tiles, [&](int64_t t0, int64_t t1) {
    const auto used_end = first_tile.begin() + ptrdiff_t(parts.size() + 1);
    size_t p = size_t(std::upper_bound(first_tile.begin(), used_end, t0) - first_tile.begin()) - 1;
    for (int64_t t = t0; t < t1;) {
      while (t >= first_tile[p + 1]) ++p;
      const int64_t end = std::min(t1, first_tile[p + 1]);  // this part's tiles in the range
      Job part = jobs[p];
      part.row_begin = (t - first_tile[p]) * tile_rows;
      part.row_end = std::min(parts[p].m, (end - first_tile[p]) * tile_rows);
      if constexpr (requires { part.read_ahead; }) {
        if (read_ahead_lines > 0) {
          const int64_t first = t * read_ahead_lines / n_tiles;
          part.read_ahead = {.ranges = read_ahead.data(),
                             .n_ranges = int32_t(read_ahead.size()),
                             .first = first,
                             .count = end * read_ahead_lines / n_tiles - first};
        }
      }
      kernel(part);
      t = end;
    }
  });
}

// Runs `kernel` on copies of `job` covering rows [0, a.m) in tiles of
// tile_rows (each copy's row_begin/row_end set): a group of one.
template <typename Job, typename Kernel>
void run_row_tiles(const MatmulArgs& a, int tile_rows, const Job& job, Kernel kernel,
                   std::span<const ByteRange> read_ahead = {}) {
  run_group_tiles<Job>(std::span<const MatmulArgs>(&a, 1), std::span<const Job>(&job, 1), tile_rows, kernel,
                       read_ahead);
}

}  // namespace

void matmul_group(std::span<const MatmulArgs> parts, std::span<const ByteRange> read_ahead) {
  const MatmulKernels* kernels = kernels_for(active_isa());
  bool shared = kernels != nullptr && parts.size() > 1 && parts.size() <= kMaxGroupParts &&
                plain_quantized_shape(parts[0]) && kernels->quant_columns_supports(parts[0].wtype);
  for (const MatmulArgs& p : parts) {
    shared = shared && plain_quantized_shape(p) && p.x == parts[0].x && p.ldx == parts[0].ldx && p.n == parts[0].n &&
             p.k == parts[0].k && p.wtype == parts[0].wtype;
  }
  if (!shared) {
    // (the read-ahead once, beside the part nearest to the op that reads it)
    for (size_t i = 0; i < parts.size(); ++i)
      matmul(parts[i], i + 1 == parts.size() ? read_ahead : std::span<const ByteRange>{});
    return;
  }
  // As matmul(): the same quantization and kernels, so each part's output
  // is bit-identical to its own matmul() call; only the quantization is
  // shared and the dispatches merged.
  const MatmulArgs& a = parts[0];
  static thread_local ActScratch scratch;
  if (a.n <= kMaxFewRows) {
    const BlockActs acts = scratch.layout_blocks(a.n, a.k);
    quantize_acts_blocks(a.x, a.ldx, acts);
    std::vector<QuantFewJob> jobs;
    for (const MatmulArgs& p : parts)
      jobs.push_back({p.wtype, static_cast<const uint8_t*>(p.w), p.w_row_bytes, &acts, p.y, p.ldy, 0, 0});
    run_group_tiles<QuantFewJob>(parts, jobs, kernels->few_tile_rows, kernels->quant_few, read_ahead);
    return;
  }
  const ColumnActs acts = scratch.layout_columns(a.n, a.k);
  ThreadPool::global().parallel_for(acts.n_groups * 2, 1, [&](int64_t o0, int64_t o1) {
    quantize_acts_columns(a.x, a.ldx, o0, o1, acts);  // 8 rows per octet
  });
  std::vector<QuantColumnsJob> jobs;
  for (const MatmulArgs& p : parts)
    jobs.push_back({p.wtype, static_cast<const uint8_t*>(p.w), p.w_row_bytes, &acts, p.y, p.ldy, 0, 0});
  run_group_tiles<QuantColumnsJob>(parts, jobs, kernels->column_tile_rows, kernels->quant_columns, read_ahead);
}

void matmul(const MatmulArgs& a, std::span<const ByteRange> read_ahead) {
  const auto info = dtype_info(a.wtype);
  BRIOCHE_CHECK(a.wtype != DType::I32, "matmul: weight dtype i32 is not a number format");
  BRIOCHE_CHECK(a.k % info.block_elems == 0, "matmul: in_features ", a.k, " is not a multiple of the ", info.name,
                " block size ", info.block_elems);
  BRIOCHE_CHECK(a.w_row_bytes >= row_bytes(a.wtype, a.k), "matmul: weight row stride ", a.w_row_bytes,
                " bytes is smaller than one ", info.name, " row of ", a.k, " elements (", row_bytes(a.wtype, a.k),
                " bytes)");
  if (a.n == 0 || a.m == 0) return;
  if (a.k == 0) {
    for (int64_t c = 0; c < a.n; ++c) std::fill_n(a.y + c * a.ldy, a.m, 0.0f);
    return;
  }
  const MatmulKernels* kernels = kernels_for(active_isa());
  if (!kernels) return matmul_scalar(a);

  const auto* w = static_cast<const uint8_t*>(a.w);
  if (!info.quantized) {
    const FloatRowsJob job{a.wtype, w, a.w_row_bytes, a.x, a.ldx, a.n, a.k, a.y, a.ldy, 0, 0};
    run_row_tiles(a, kernels->rows_per_tile, job, kernels->float_rows);
    return;
  }

  // Quantize the activations once; every weight row reuses them.
  static thread_local ActScratch scratch;
  const bool column_type = kernels->quant_columns_supports(a.wtype);
  if (column_type && a.n <= kMaxFewRows) {
    // Decode: the few-row kernel, with the column kernels' arithmetic (a
    // sequence's logits do not depend on what it is batched with).
    const BlockActs acts = scratch.layout_blocks(a.n, a.k);
    quantize_acts_blocks(a.x, a.ldx, acts);
    run_row_tiles(a, kernels->few_tile_rows, QuantFewJob{a.wtype, w, a.w_row_bytes, &acts, a.y, a.ldy, 0, 0},
                  kernels->quant_few, read_ahead);
    return;
  }
  if (column_type) {
    const ColumnActs acts = scratch.layout_columns(a.n, a.k);
    ThreadPool::global().parallel_for(acts.n_groups * 2, 1, [&](int64_t o0, int64_t o1) {
      quantize_acts_columns(a.x, a.ldx, o0, o1, acts);  // 8 rows per octet
    });
    run_row_tiles(a, kernels->column_tile_rows, QuantColumnsJob{a.wtype, w, a.w_row_bytes, &acts, a.y, a.ldy, 0, 0},
                  kernels->quant_columns, read_ahead);
    return;
  }
  const QuantizedActs acts = scratch.layout(a.n, a.k);
  if (a.n >= 8) {
    ThreadPool::global().parallel_for(a.n, 4, [&](int64_t r0, int64_t r1) { quantize_acts(a.x, a.ldx, r0, r1, acts); });
  } else {
    quantize_acts(a.x, a.ldx, 0, a.n, acts);
  }
  run_row_tiles(a, kernels->rows_per_tile, QuantRowsJob{a.wtype, w, a.w_row_bytes, &acts, a.y, a.ldy, 0, 0},
                kernels->quant_rows);
}

}  // namespace brioche::cpu
