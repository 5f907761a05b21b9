// Unmerged LoRA for a batch whose rows use different adapters, or none
// (serving many adapters in one batch: S-LoRA / Punica):
//
//   y[r] += (x[r]·A_gᵀ)·bt_g      for every row r of segment g
//
// A_g [rank, in] and bt_g = s_g·B_gᵀ [rank, out] are f16 on the tensors'
// device (the adapter's scale folded into bt once, at load); x, y and the
// sums are f32. Decoding reads every factor of the batch's adapters each
// step, so their bytes are its cost: f16 halves them, at one rounding of
// each factor (2^-11 relative). Rows outside
// every segment keep y. One call per projection whatever the adapters: a
// shrink (u = x·Aᵀ) and an expand (y += u·bt), on the CPU one parallel
// loop over blocks of a segment's rows (each factor row read once per
// block; a task shrinks its block, then expands it), on CUDA two launches
// (backend/cuda/lora_rows.h).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/cpu/lora_rows.h"
#include "backend/cpu/matmul.h"
#include "core/tensor.h"

namespace brioche::ops {

struct LoraRows {
  int32_t first_row = 0, n_rows = 0;
  const Tensor* a = nullptr;   // f16 [rank, in], or CPU Q8_0 from lora_factor_q8_0: [in / 32, rank · 32]
  const Tensor* bt = nullptr;  // f16 [rank, out], or CPU Q8_0 from lora_factor_q8_0: [out / 32, rank · 32]
};

// A factor f [rank, n] (f16 or f32, n a multiple of 32) in Q8_0 for the CPU
// kernels, by block column: row b of the result holds f[k, 32b..32b+32)
// for k = 0..rank−1 as rank blocks of 32 (an f16 scale, 32 int8), so a
// kernel that takes every factor row's block b at once reads the factor as
// one stream (the hardware prefetcher follows it; rank short row streams
// it does not), and half the bytes of f16.
Tensor lora_factor_q8_0(const Tensor& factor);

// Copies of the contiguous CPU tensors *factors[i], in that order, in one
// buffer (each from a 64-byte boundary), put in place of the originals. The
// server packs an adapter's factors in the order a decode step reads them
// (layer by layer: Q's A and s·Bᵀ, then K's, ... Down's): a task of
// lora_rows_add_group takes one adapter's projections in turn, so it reads
// one near-sequential stream. Factors allocated one by one lie scattered
// over the heap, each a stream of a few KB that starts from DRAM with its
// own latency (and often its own TLB miss).
void pack_in_order(std::span<Tensor* const> factors);

// The largest adapter rank the op takes.
int32_t max_lora_rows_rank();

// x [n, in] f32 rows, y [n, out] f32 rows (strided views allowed), segments
// inside [0, n) and disjoint; u_scratch f32 [n, ≥ the largest rank]
// receives x·Aᵀ (the shrink's output) for the segments' rows.
void lora_rows_add(const Tensor& x, std::span<const LoraRows> segments, Tensor& y, Tensor& u_scratch);

// lora_rows_add for 1–3 projections of one x (Q/K/V, gate/up), each with its
// own segments (an adapter may leave a projection alone): the same sums,
// on the CPU in one pool dispatch for all of them (u_scratch then left
// unwritten), on CUDA one call per part.
struct LoraRowsPart {
  std::span<const LoraRows> segments;
  Tensor* y = nullptr;  // [n, out] f32, added to
};
void lora_rows_add_group(const Tensor& x, std::span<const LoraRowsPart> parts, Tensor& u_scratch);

// The bytes a lora_rows_add_group of `parts` reads (its CPU factors; ranges
// that meet merged, so an adapter whose factors pack_in_order laid out
// gives at most one range a projection), written to the front of
// `storage`; returns that part of it. The model hands them to the base
// projection of the same x as its read-ahead (ops/fused_matmul.h): a step's
// base weights evict the factors, which would otherwise come from DRAM while
// the adapters' kernels wait on them, a stream of a few KB per adapter and
// projection; requested a few lines per weight block of the projection,
// they arrive under its dot products. Where the factors need more ranges
// than `storage` holds, the first ones only: a read-ahead changes no
// result, so a step with more adapters than the storage covers runs, its
// later factors read from memory when their kernel reaches them.
std::span<const cpu::ByteRange> lora_rows_read_ahead(std::span<const LoraRowsPart> parts,
                                                     std::span<cpu::ByteRange> storage);

// The storage a caller of lora_rows_read_ahead keeps on its stack: one
// range per factor at most, two per adapter segment and projection, so
// 96 cover 3 projections of 16 segments none of whose factors meet (a step
// of 16 sequences over 16 adapters); 1.5 KB.
inline constexpr size_t kLoraReadAheadRanges = 96;

// The same update with the batch's adapters as data on the tensors' device
// (Punica's BGMV: each row finds its adapter's factors itself), so one
// recorded launch serves any mix: a decode CUDA graph replays it with a new
// row→adapter map and factor table uploaded before each step
// (model/adapter_table.h builds both and checks every factor's shape).
struct LoraTable {
  const Tensor* row_slot = nullptr;  // i32 [n]: the row's adapter slot, −1 for none
  const Tensor* factors = nullptr;   // i32 words: backend::cpu::LoraFactors [slots · slot_stride]
  int32_t slot_stride = 0;           // entries per slot (layers · projections)
  int32_t rank_cap = 0;              // ≥ every rank the table holds
};
struct LoraTablePart {
  int32_t entry = 0;    // the projection's entry within a slot (layer · projections + projection)
  Tensor* y = nullptr;  // [n, out] f32, added to
};
// For 1–3 projections of one x [n, in] (Q/K/V, gate/up): y_p[r] +=
// (x[r]·A_{s,p}ᵀ)·bt_{s,p} for every row r of slot s ≥ 0, in two launches on
// CUDA whatever the mix. u_scratch f32 [n, ≥ parts · rank_cap].
void lora_table_add(const Tensor& x, const LoraTable& table, std::span<const LoraTablePart> parts, Tensor& u_scratch);

// lora_table_add's two halves, for a caller that runs the base projection
// between them: the shrink (u = x·Aᵀ) reads only x, so it can go before the
// GEMV that writes y, off the GEMV's critical path; the expand (y += u·bt)
// after it. The same arguments for both; u_scratch carries u between them.
void lora_table_shrink(const Tensor& x, const LoraTable& table, std::span<const LoraTablePart> parts,
                       Tensor& u_scratch);
void lora_table_expand(const Tensor& x, const LoraTable& table, std::span<const LoraTablePart> parts,
                       Tensor& u_scratch);

// lora_table_shrink of x̂ = RMSNorm(x)·weight instead of x (each row's
// rstd computed beside the dot products: backend/cpu/lora_rows.h,
// LoraTableArgs::norm_w), for a base projection that normalises x inside
// its own GEMV: no x̂ is written and no norm runs apart.
struct LoraInputNorm {
  const Tensor& weight;  // [in] f32
  float eps;
};
void lora_table_shrink(const Tensor& x, const LoraInputNorm& norm, const LoraTable& table,
                       std::span<const LoraTablePart> parts, Tensor& u_scratch);
// The expand handed to the base projection that writes the parts' y
// (ops/fused_matmul.h: matmul_group, swiglu_matmul, matmul_accumulate take
// it): the same terms as lora_table_expand, which the GPU's streamed decode
// GEMV adds through its own reduction (backend/cuda/gemv_stream.cuh), so the
// adapted projection is the shrink and the base GEMV, no expand launch
// between them and the next op; elsewhere the expand runs after the base.
struct LoraTerms {
  const LoraTable& table;
  std::span<const LoraTablePart> parts;  // each part's y is one of the projection's outputs
  Tensor& u_scratch;                     // lora_table_shrink's output
};

namespace detail {
// The checked backend arguments of the table path for x (both halves check
// the whole table, so either alone is as safe as the pair).
backend::cpu::LoraTableArgs lora_table_args(const char* op, const Tensor& x, const LoraTable& table,
                                            std::span<const LoraTablePart> parts, const Tensor& u_scratch);
}  // namespace detail

}  // namespace brioche::ops
