// The LoRA table's shrink of a normalised x (ops/lora_rows.h,
// LoraInputNorm) equals the separate ops it replaces in the adapted blocks
// (rms_norm, then the shrink), on the CPU's reference loops and on CUDA
// against them; the terms' refusals in swiglu_matmul. Rows of two slots and
// of the base, a slot that leaves a projection alone. (The terms themselves:
// lora_terms_test.cpp.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/lora_rows.h"
#include "core/error.h"
#include "core/half.h"
#include "ops/device.h"
#include "ops/fused_matmul.h"
#include "ops/lora_rows.h"
#include "ops/rms_norm.h"

namespace brioche::ops {
namespace {

constexpr int64_t kRows = 5, kIn = 96, kOut = 80, kRankCap = 8;
constexpr float kEps = 1e-5f;

// Two projections (gate and up shapes: in → out each) of two slots:
// slot 0 rank 8 on both, slot 1 rank 3 on part 0 only; rows 1 and 3 have
// no slot.
struct TableCase {
  std::mt19937 rng{7};
  std::normal_distribution<float> normal{0.0f, 1.0f};
  std::vector<Tensor> factors;  // per (slot, part): a, bt (undefined where the slot leaves the part alone)
  Tensor words, slots, x, norm_w, gate, up, u;

  Tensor f32(int64_t r, int64_t c, float scale = 1.0f) {
    Tensor t = Tensor::zeros(DType::F32, {r, c});
    for (int64_t i = 0; i < r * c; ++i) t.data_as<float>()[i] = scale * normal(rng);
    return t;
  }
  Tensor f16(int64_t r, int64_t c) {
    Tensor t = Tensor::zeros(DType::F16, {r, c});
    for (int64_t i = 0; i < r * c; ++i) t.data_as<uint16_t>()[i] = f32_to_f16(0.3f * normal(rng));
    return t;
  }
  TableCase() {
    const int ranks[2][2] = {{8, 8}, {3, 0}};
    for (auto& slot : ranks)
      for (int r : slot) {
        factors.push_back(r ? f16(r, kIn) : Tensor());
        factors.push_back(r ? f16(r, kOut) : Tensor());
      }
    slots = Tensor::zeros(DType::I32, {kRows});
    const int32_t row_slot[kRows] = {1, -1, 0, -1, 0};
    std::memcpy(slots.data(), row_slot, sizeof(row_slot));
    x = f32(kRows, kIn, 3.0f);  // far from unit RMS: the norm matters
    norm_w = f32(1, kIn).reshape({kIn});
    gate = f32(kRows, kOut);
    up = f32(kRows, kOut);
    u = Tensor::zeros(DType::F32, {kRows, 2 * kRankCap});
    words = table_words(factors);
  }
  static Tensor table_words(const std::vector<Tensor>& f) {
    std::vector<backend::cpu::LoraFactors> entries;
    for (size_t i = 0; i < f.size(); i += 2)
      entries.push_back(f[i].defined() ? backend::cpu::LoraFactors{.a = f[i].data_as<uint16_t>(),
                                                                   .bt = f[i + 1].data_as<uint16_t>(),
                                                                   .rank = int32_t(f[i].dim(0))}
                                       : backend::cpu::LoraFactors{});
    Tensor t = Tensor::zeros(DType::I32, {int64_t(entries.size() * 6)});
    std::memcpy(t.data(), entries.data(), entries.size() * sizeof(entries[0]));
    return t;
  }
};

// A copy of t on `device` (to_device returns t itself on its own device).
Tensor copy_on(const Tensor& t, Device device) {
  Tensor out = t.rank() == 1 ? zeros(t.dtype(), {t.dim(0)}, device) : zeros(t.dtype(), {t.dim(0), t.dim(1)}, device);
  copy(t, out);
  return out;
}

// The same case's tensors on one device, copies of its own.
struct OnDevice {
  std::vector<Tensor> factors;
  Tensor words, slots, x, norm_w, gate, up, u;
  explicit OnDevice(const TableCase& c, Device d) {
    for (const Tensor& t : c.factors) factors.push_back(t.defined() ? copy_on(t, d) : Tensor());
    words = copy_on(TableCase::table_words(factors), d);
    slots = copy_on(c.slots, d);
    x = copy_on(c.x, d);
    norm_w = copy_on(c.norm_w, d);
    gate = copy_on(c.gate, d);
    up = copy_on(c.up, d);
    u = copy_on(c.u, d);
  }
  LoraTable table() const { return {.row_slot = &slots, .factors = &words, .slot_stride = 2, .rank_cap = kRankCap}; }
  std::vector<LoraTablePart> parts() { return {{.entry = 0, .y = &gate}, {.entry = 1, .y = &up}}; }
};

Tensor on_cpu(const Tensor& t) { return copy_on(t, Device::CPU); }

double max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.numel(), b.numel());
  double d = 0;
  for (int64_t i = 0; i < a.numel(); ++i)
    d = std::max(d, double(std::abs(a.data_as<float>()[i] - b.data_as<float>()[i])));
  return d;
}

// u of the normalised shrink on one device.
Tensor run_normalised_shrink(OnDevice& d) {
  auto parts = d.parts();
  lora_table_shrink(d.x, {.weight = d.norm_w, .eps = kEps}, d.table(), parts, d.u);
  return on_cpu(d.u);
}

TEST(LoraTable, NormalisedShrinkEqualsTheNormThenTheShrink) {
  TableCase c;
  OnDevice fused(c, Device::CPU);
  const Tensor got = run_normalised_shrink(fused);

  // The separate ops: x̂ = RMSNorm(x)·w, then its shrink.
  OnDevice apart(c, Device::CPU);
  Tensor normed = Tensor::zeros(DType::F32, {kRows, kIn});
  rms_norm(apart.x, apart.norm_w, kEps, normed);
  auto parts = apart.parts();
  lora_table_shrink(normed, apart.table(), parts, apart.u);
  EXPECT_LT(max_abs_diff(got, apart.u), 1e-4);

  // Not vacuous: x's scale reaches u only through the norm (the plain
  // shrink of x differs by ~3x).
  OnDevice raw(c, Device::CPU);
  auto raw_parts = raw.parts();
  lora_table_shrink(raw.x, raw.table(), raw_parts, raw.u);
  EXPECT_GT(max_abs_diff(raw.u, apart.u), 1e-1);
}

TEST(LoraTable, FusedVariantsRefuseWrongShapes) {
  TableCase c;
  OnDevice d(c, Device::CPU);
  auto parts = d.parts();
  const Tensor short_w = Tensor::zeros(DType::F32, {kIn - 1});
  EXPECT_THROW(lora_table_shrink(d.x, {.weight = short_w, .eps = kEps}, d.table(), parts, d.u), Error);
  // SwiGLU's terms name gate's and up's outputs: one part, or the wrong
  // tensors, is refused before anything runs.
  const Tensor w = Tensor::zeros(DType::F32, {kOut, kIn});
  Tensor normed = Tensor::zeros(DType::F32, {kRows, kIn});
  const LoraTable table = d.table();
  const std::vector<LoraTablePart> one = {parts[0]};
  const LoraTerms one_part{.table = table, .parts = one, .u_scratch = d.u};
  EXPECT_THROW(swiglu_matmul(d.x, {.weight = d.norm_w, .eps = kEps, .normed = normed}, {.gate = w, .up = w}, d.gate,
                             d.up, &one_part),
               Error);
  const LoraTerms swapped_parts{.table = table, .parts = parts, .u_scratch = d.u};
  EXPECT_THROW(swiglu_matmul(d.x, {.weight = d.norm_w, .eps = kEps, .normed = normed}, {.gate = w, .up = w}, d.up,
                             d.gate, &swapped_parts),
               Error);
}

TEST(CudaLoraTable, NormalisedShrinkMatchesTheCpu) {
  if (!cuda_available()) GTEST_SKIP() << "skipped: no CUDA device";
  TableCase c;
  OnDevice cpu(c, Device::CPU), gpu(c, Device::CUDA);
  EXPECT_LT(max_abs_diff(run_normalised_shrink(gpu), run_normalised_shrink(cpu)), 1e-4);
}

// The case's rows repeated `copies` times: a batch as large as a server's.
TableCase tiled(const TableCase& c, int64_t copies) {
  TableCase t = c;
  auto tile = [&](const Tensor& src) {
    const int64_t rows = src.dim(0), cols = src.rank() == 1 ? 1 : src.dim(1);
    Tensor out = src.rank() == 1 ? Tensor::zeros(src.dtype(), {rows * copies})
                                 : Tensor::zeros(src.dtype(), {rows * copies, cols});
    for (int64_t i = 0; i < copies; ++i)
      std::memcpy(static_cast<char*>(out.data()) + i * src.nbytes(), src.data(), src.nbytes());
    return out;
  };
  t.slots = tile(c.slots);
  t.x = tile(c.x);
  t.gate = tile(c.gate);
  t.up = tile(c.up);
  t.u = tile(c.u);
  return t;
}

// The CUDA shrink gives a block more ranks as the rows grow (fewer reads of
// x); a row's u must not depend on how many rows share its step, bit for
// bit, or a request's tokens would change with the server's load.
TEST(CudaLoraTable, ARowsShrinkHasTheSameBitsInAnyBatch) {
  if (!cuda_available()) GTEST_SKIP() << "skipped: no CUDA device";
  const TableCase c;
  for (const bool normalised : {false, true}) {
    // u of the case's shrink on `device`, of x or of its RMSNorm.
    auto shrink = [&](const TableCase& tc, Device device) {
      OnDevice d(tc, device);
      auto parts = d.parts();
      if (normalised)
        lora_table_shrink(d.x, {.weight = d.norm_w, .eps = kEps}, d.table(), parts, d.u);
      else
        lora_table_shrink(d.x, d.table(), parts, d.u);
      return on_cpu(d.u);
    };
    const Tensor one = shrink(c, Device::CUDA);
    for (const int64_t copies : {13, 52, 200}) {
      const Tensor many = shrink(tiled(c, copies), Device::CUDA);
      for (int64_t i = 0; i < copies; ++i)
        ASSERT_EQ(std::memcmp(static_cast<const char*>(many.data()) + i * one.nbytes(), one.data(), one.nbytes()), 0)
            << (normalised ? "normalised" : "plain") << " shrink, " << copies * kRows << " rows: copy " << i
            << " differs from the same rows alone";
    }
    // And the batch's values are the CPU's.
    const TableCase tall = tiled(c, 200);
    EXPECT_LT(max_abs_diff(shrink(tall, Device::CUDA), shrink(tall, Device::CPU)), 1e-4);
  }
}

}  // namespace
}  // namespace brioche::ops
