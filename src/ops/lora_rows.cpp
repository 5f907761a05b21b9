#include "ops/lora_rows.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backend/cpu/lora_rows.h"
#include "ops/check_f32.h"
#include "ops/quantize.h"
#if BRIOCHE_CUDA
#include "backend/cuda/lora_rows.h"
#endif

namespace brioche::ops {

int32_t max_lora_rows_rank() { return backend::cpu::kMaxLoraRowsRank; }

namespace {

constexpr int64_t kQ8Block = 32;

}  // namespace

Tensor lora_factor_q8_0(const Tensor& factor) {
  BRIOCHE_CHECK((factor.dtype() == DType::F16 || factor.dtype() == DType::F32) && factor.rank() == 2 &&
                    factor.device() == Device::CPU && factor.dim(1) % kQ8Block == 0,
                "lora_factor_q8_0: a CPU f16 or f32 factor [rank, n] with n a multiple of ", kQ8Block, ", got ",
                factor.describe());
  const int64_t rank = factor.dim(0), n = factor.dim(1);
  const Tensor f32 = factor.dtype() == DType::F32 ? factor : convert(factor, DType::F32);
  // Column block b of every factor row, gathered as the rank rows of one
  // [rank, 32] matrix: quantized as one row of rank blocks.
  Tensor out = Tensor::zeros(DType::Q8_0, {n / kQ8Block, rank * kQ8Block});
  std::vector<float> column_block(size_t(rank * kQ8Block));
  for (int64_t b = 0; b < n / kQ8Block; ++b) {
    for (int64_t k = 0; k < rank; ++k)
      std::copy_n(f32.row_as<float>(k) + b * kQ8Block, kQ8Block, column_block.data() + k * kQ8Block);
    quantize_row(DType::Q8_0, column_block.data(), out.row_ptr(b), rank * kQ8Block);
  }
  return out;
}

void pack_in_order(std::span<Tensor* const> factors) {
  const auto padded = [](size_t bytes) { return (bytes + 63) / 64 * 64; };
  size_t total = 0;
  for (const Tensor* f : factors) {
    BRIOCHE_CHECK(f->device() == Device::CPU && f->is_contiguous(), "pack_in_order: a contiguous CPU tensor, got ",
                  f->describe());
    total += padded(f->nbytes());
  }
  if (total == 0) return;
  void* buffer = std::aligned_alloc(64, total);
  BRIOCHE_CHECK(buffer != nullptr, "pack_in_order: could not allocate ", total, " bytes");
  const std::shared_ptr<void> owner(buffer, [](void* p) { std::free(p); });
  size_t offset = 0;
  for (Tensor* f : factors) {
    char* data = static_cast<char*>(buffer) + offset;
    std::memcpy(data, f->data(), f->nbytes());
    *f = Tensor::view(data, f->dtype(), f->shape().data(), f->rank(), owner);
    offset += padded(f->nbytes());
  }
}

namespace {

// The checked backend arguments of one projection; segs receives the
// segments the arguments point to.
backend::cpu::LoraRowsArgs rows_args(const Tensor& x, std::span<const LoraRows> segments, Tensor& y, Tensor& u_scratch,
                                     std::vector<backend::cpu::LoraRowsSegment>& segs) {
  auto xs = detail::f32_rows(x, "lora_rows_add", "x");
  auto ys = detail::f32_rows(y, "lora_rows_add", "y");
  auto us = detail::f32_rows(u_scratch, "lora_rows_add", "u_scratch");
  BRIOCHE_CHECK(xs.n_rows == ys.n_rows, "lora_rows_add: x ", x.describe(), " and y ", y.describe(), " differ in rows");
  const Device device = detail::common_device("lora_rows_add", {&x, &y, &u_scratch});
  segs.clear();
  segs.reserve(segments.size());
  int32_t end_of_previous = 0;
  for (const LoraRows& s : segments) {
    BRIOCHE_CHECK(s.a != nullptr && s.bt != nullptr, "lora_rows_add: a segment without factors");
    const Tensor& a = *s.a;
    const Tensor& bt = *s.bt;
    // f16, or on the CPU Q8_0 by block column (lora_factor_q8_0).
    const auto factor_format_ok = [&](const Tensor& f) {
      return f.dtype() == DType::F16 || (f.dtype() == DType::Q8_0 && device == Device::CPU);
    };
    BRIOCHE_CHECK(factor_format_ok(a) && factor_format_ok(bt) && a.rank() == 2 && bt.rank() == 2 && a.is_contiguous() &&
                      bt.is_contiguous() && a.device() == device && bt.device() == device,
                  "lora_rows_add: factors must be contiguous f16 (or, on the CPU, q8_0) matrices on ",
                  device_name(device), ", got ", a.describe(), " and ", bt.describe());
    const auto rank_of = [](const Tensor& f) { return f.dtype() == DType::Q8_0 ? f.dim(1) / kQ8Block : f.dim(0); };
    const auto features_of = [](const Tensor& f) { return f.dtype() == DType::Q8_0 ? f.dim(0) * kQ8Block : f.dim(1); };
    const int64_t rank = rank_of(a);
    BRIOCHE_CHECK(features_of(a) == xs.dim && rank_of(bt) == rank && features_of(bt) == ys.dim, "lora_rows_add: A ",
                  a.describe(), " and s·Bᵀ ", bt.describe(), " do not map ", xs.dim, " features to ", ys.dim);
    BRIOCHE_CHECK(rank >= 1 && rank <= max_lora_rows_rank() && rank <= us.dim, "lora_rows_add: rank ", rank,
                  " outside [1, ", std::min<int64_t>(max_lora_rows_rank(), us.dim), "]");
    BRIOCHE_CHECK(s.first_row >= end_of_previous && s.n_rows >= 0 && s.first_row + s.n_rows <= xs.n_rows &&
                      s.first_row + s.n_rows <= us.n_rows,
                  "lora_rows_add: segment rows [", s.first_row, ", ", s.first_row + s.n_rows,
                  ") overlap the previous one or leave the batch of ", xs.n_rows);
    end_of_previous = s.first_row + s.n_rows;
    const bool a_q8 = a.dtype() == DType::Q8_0, bt_q8 = bt.dtype() == DType::Q8_0;
    segs.push_back({.first_row = s.first_row,
                    .n_rows = s.n_rows,
                    .rank = int32_t(rank),
                    .a = a_q8 ? nullptr : a.data_as<uint16_t>(),
                    .bt = bt_q8 ? nullptr : bt.data_as<uint16_t>(),
                    .a_q8 = a_q8 ? a.data_as<uint8_t>() : nullptr,
                    .bt_q8 = bt_q8 ? bt.data_as<uint8_t>() : nullptr});
  }
  return backend::cpu::LoraRowsArgs{.x = xs.data,
                                    .y = ys.data,
                                    .u = us.data,
                                    .in = xs.dim,
                                    .out = ys.dim,
                                    .ldx = xs.stride,
                                    .ldy = ys.stride,
                                    .ldu = us.stride,
                                    .segments = segs.data(),
                                    .n_segments = int32_t(segs.size())};
}

}  // namespace

void lora_rows_add(const Tensor& x, std::span<const LoraRows> segments, Tensor& y, Tensor& u_scratch) {
  y.note_written();
  u_scratch.note_written();
  if (segments.empty()) return;
  std::vector<backend::cpu::LoraRowsSegment> segs;
  const backend::cpu::LoraRowsArgs args = rows_args(x, segments, y, u_scratch, segs);
  if (x.device() == Device::CUDA) {
#if BRIOCHE_CUDA
    return cuda::lora_rows_add(args);
#else
    detail::fail_no_cuda("lora_rows_add");
#endif
  }
  backend::cpu::lora_rows_add(args);
}

void lora_rows_add_group(const Tensor& x, std::span<const LoraRowsPart> parts, Tensor& u_scratch) {
  BRIOCHE_CHECK(parts.size() <= size_t(backend::cpu::kLoraTableParts), "lora_rows_add_group: 1 to ",
                backend::cpu::kLoraTableParts, " projections, got ", parts.size());
  if (x.device() == Device::CUDA) {
    for (const LoraRowsPart& p : parts) {
      BRIOCHE_CHECK(p.y != nullptr, "lora_rows_add_group: a part without its output");
      lora_rows_add(x, p.segments, *p.y, u_scratch);
    }
    return;
  }
  std::vector<backend::cpu::LoraRowsSegment> segs[backend::cpu::kLoraTableParts];
  std::vector<backend::cpu::LoraRowsArgs> args;
  for (size_t p = 0; p < parts.size(); ++p) {
    BRIOCHE_CHECK(parts[p].y != nullptr, "lora_rows_add_group: a part without its output");
    parts[p].y->note_written();
    if (parts[p].segments.empty()) continue;
    args.push_back(rows_args(x, parts[p].segments, *parts[p].y, u_scratch, segs[p]));
    args.back().u = nullptr;  // each task keeps its block's u
  }
  if (!args.empty()) backend::cpu::lora_rows_add_group(args);
}

std::span<const cpu::ByteRange> lora_rows_read_ahead(std::span<const LoraRowsPart> parts,
                                                     std::span<cpu::ByteRange> storage) {
  size_t n = 0;
  // Where a range ends up to its next cache line: pack_in_order starts each
  // factor at a 64-byte boundary, so the next factor of the pack meets it.
  const auto line_end = [](const cpu::ByteRange& r) {
    return (reinterpret_cast<uintptr_t>(r.data) + r.bytes + 63) / 64 * 64;
  };
  for (const LoraRowsPart& p : parts)
    for (const LoraRows& s : p.segments)
      for (const Tensor* f : {s.a, s.bt}) {
        if (f == nullptr || f->device() != Device::CPU) continue;
        const auto data = reinterpret_cast<uintptr_t>(f->data());
        if (n > 0 && line_end(storage[n - 1]) == data) {
          storage[n - 1].bytes = data + f->nbytes() - reinterpret_cast<uintptr_t>(storage[n - 1].data);
          continue;
        }
        if (n == storage.size()) return storage;  // full: the first ranges only (above)
        storage[n++] = {.data = f->data(), .bytes = f->nbytes()};
      }
  return storage.first(n);
}

namespace {

enum class TableHalf { Shrink, Expand };

}  // namespace

// The shrink reads x and writes u; the expand reads u and adds to each
// part's y.
backend::cpu::LoraTableArgs detail::lora_table_args(const char* op, const Tensor& x, const LoraTable& table,
                                                    std::span<const LoraTablePart> parts, const Tensor& u_scratch) {
  BRIOCHE_CHECK(!parts.empty() && parts.size() <= size_t(backend::cpu::kLoraTableParts), op, ": 1 to ",
                backend::cpu::kLoraTableParts, " projections, got ", parts.size());
  BRIOCHE_CHECK(table.row_slot != nullptr && table.factors != nullptr, op, ": a table without its data");
  auto xs = detail::f32_rows(x, op, "x");
  auto us = detail::f32_rows(u_scratch, op, "u_scratch");
  const Tensor& slots = *table.row_slot;
  const Tensor& factors = *table.factors;
  BRIOCHE_CHECK(slots.dtype() == DType::I32 && slots.rank() == 1 && slots.dim(0) >= xs.n_rows && slots.is_contiguous(),
                op, ": row slots must be i32 [", xs.n_rows, "], got ", slots.describe());
  constexpr int64_t kWords = int64_t(sizeof(backend::cpu::LoraFactors) / 4);
  BRIOCHE_CHECK(factors.dtype() == DType::I32 && factors.rank() == 1 && factors.dim(0) % kWords == 0 &&
                    factors.is_contiguous() && reinterpret_cast<uintptr_t>(factors.data()) % 8 == 0,
                op, ": factors must be 8-byte aligned i32 words, ", kWords, " per entry; got ", factors.describe());
  BRIOCHE_CHECK(table.rank_cap >= 1 && table.rank_cap <= max_lora_rows_rank() && table.slot_stride >= 1, op,
                ": rank cap ", table.rank_cap, " outside [1, ", max_lora_rows_rank(), "]");
  BRIOCHE_CHECK(us.n_rows >= xs.n_rows && us.dim >= int64_t(parts.size()) * table.rank_cap, op, ": u_scratch ",
                u_scratch.describe(), " smaller than [", xs.n_rows, ", ", int64_t(parts.size()) * table.rank_cap, "]");
  detail::common_device(op, {&x, &u_scratch, &slots, &factors});
  backend::cpu::LoraTableArgs args{.x = xs.data,
                                   .ldx = xs.stride,
                                   .in = xs.dim,
                                   .n_rows = int32_t(xs.n_rows),
                                   .row_slot = slots.data_as<int32_t>(),
                                   .factors = static_cast<const backend::cpu::LoraFactors*>(factors.data()),
                                   .slot_stride = table.slot_stride,
                                   .rank_cap = table.rank_cap,
                                   .n_parts = int32_t(parts.size()),
                                   .u = us.data,
                                   .ldu = us.stride};
  const int64_t entries = factors.dim(0) / kWords;
  for (size_t p = 0; p < parts.size(); ++p) {
    BRIOCHE_CHECK(
        parts[p].y != nullptr && parts[p].entry >= 0 && parts[p].entry < table.slot_stride && parts[p].entry < entries,
        op, ": part ", p, " names entry ", parts[p].entry, " of a slot of ", table.slot_stride);
    auto ys = detail::f32_rows(*parts[p].y, op, "y");
    BRIOCHE_CHECK(ys.n_rows == xs.n_rows, op, ": x ", x.describe(), " and y ", parts[p].y->describe(),
                  " differ in rows");
    detail::common_device(op, {&x, parts[p].y});
    args.entry[p] = parts[p].entry;
    args.y[p] = ys.data;
    args.ldy[p] = ys.stride;
    args.out[p] = ys.dim;
  }
  return args;
}

namespace {

void run_table_half(TableHalf half, const char* op, const backend::cpu::LoraTableArgs& args,
                    std::span<const LoraTablePart> parts, Tensor& u_scratch, const Tensor& x) {
  if (half == TableHalf::Shrink) {
    u_scratch.note_written();
  } else {
    for (const LoraTablePart& p : parts) p.y->note_written();
  }
  if (x.device() == Device::CUDA) {
#if BRIOCHE_CUDA
    return half == TableHalf::Shrink ? cuda::lora_table_shrink(args) : cuda::lora_table_expand(args);
#else
    detail::fail_no_cuda(op);
#endif
  }
  half == TableHalf::Shrink ? backend::cpu::lora_table_shrink(args) : backend::cpu::lora_table_expand(args);
}

}  // namespace

void lora_table_shrink(const Tensor& x, const LoraTable& table, std::span<const LoraTablePart> parts,
                       Tensor& u_scratch) {
  const char* op = "lora_table_shrink";
  run_table_half(TableHalf::Shrink, op, detail::lora_table_args(op, x, table, parts, u_scratch), parts, u_scratch, x);
}

void lora_table_shrink(const Tensor& x, const LoraInputNorm& norm, const LoraTable& table,
                       std::span<const LoraTablePart> parts, Tensor& u_scratch) {
  const char* op = "lora_table_shrink (normalised x)";
  backend::cpu::LoraTableArgs args = detail::lora_table_args(op, x, table, parts, u_scratch);
  const detail::F32Rows ws = detail::f32_rows(norm.weight, op, "norm weight");
  BRIOCHE_CHECK(ws.n_rows == 1 && ws.dim == args.in, op, ": norm weight must be [", args.in, "], got ",
                norm.weight.describe());
  detail::common_device(op, {&x, &norm.weight});
  args.norm_w = ws.data;
  args.norm_eps = norm.eps;
  run_table_half(TableHalf::Shrink, op, args, parts, u_scratch, x);
}

void lora_table_expand(const Tensor& x, const LoraTable& table, std::span<const LoraTablePart> parts,
                       Tensor& u_scratch) {
  const char* op = "lora_table_expand";
  run_table_half(TableHalf::Expand, op, detail::lora_table_args(op, x, table, parts, u_scratch), parts, u_scratch, x);
}

void lora_table_add(const Tensor& x, const LoraTable& table, std::span<const LoraTablePart> parts, Tensor& u_scratch) {
  lora_table_shrink(x, table, parts, u_scratch);
  lora_table_expand(x, table, parts, u_scratch);
}

}  // namespace brioche::ops
