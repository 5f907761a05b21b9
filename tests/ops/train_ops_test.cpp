// The training ops of ops/dropout.h, scaled_add.h, gather_rows.h,
// logp_head.h and adamw.h on the CPU, against naive references (double
// precision where arithmetic differs). The CUDA versions are checked against
// these in tests/backend/cuda_train_ops_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "ops/adamw.h"
#include "ops/dropout.h"
#include "ops/gather_rows.h"
#include "ops/device.h"
#include "ops/logp_head.h"
#include "ops/lora_matmul.h"
#include "ops/quantize.h"
#include "ops/scaled_add.h"
#include "ops/swiglu.h"
#include "ops/test_tensors.h"

namespace brioche {
namespace {

float at(const Tensor& t, int64_t r, int64_t c) { return t.row_as<float>(r)[c]; }

TEST(TrainOps, DropoutMaskIsThePureHashAndReplays) {
  const float p = 0.25f;
  const ops::DropoutMask mask{p, dropout_key(1234, 5, 2)};
  Tensor x = random_f32(37, 129, 1);
  Tensor xv = padded(x, 3);
  Tensor y = Tensor::zeros(DType::F32, {37, 129});
  ops::dropout(xv, mask, y);
  int64_t dropped = 0;
  for (int64_t r = 0; r < 37; ++r) {
    for (int64_t c = 0; c < 129; ++c) {
      const float f = dropout_factor(mask.key, p, r, c);
      ASSERT_TRUE(f == 0.0f || f == 1.0f / (1.0f - p));
      ASSERT_EQ(at(y, r, c), at(x, r, c) * f) << r << "," << c;
      dropped += f == 0.0f;
    }
  }
  // 4,773 Bernoulli(0.25) draws: 5 standard deviations is ±0.031.
  EXPECT_NEAR(double(dropped) / (37 * 129), p, 0.031);
  // In place gives the same; another key another mask; p = 0 is the identity.
  Tensor z = x.slice(0, 0, 37);
  Tensor inplace = padded(x, 0);
  ops::dropout(inplace, mask, inplace);
  for (int64_t r = 0; r < 37; ++r)
    for (int64_t c = 0; c < 129; ++c) ASSERT_EQ(at(inplace, r, c), at(y, r, c));
  Tensor other = Tensor::zeros(DType::F32, {37, 129});
  ops::dropout(x, {p, dropout_key(1234, 5, 3)}, other);
  int64_t differ = 0;
  for (int64_t r = 0; r < 37; ++r)
    for (int64_t c = 0; c < 129; ++c) differ += at(other, r, c) != at(y, r, c);
  EXPECT_GT(differ, 37 * 129 / 5);
  ops::dropout(x, {0.0f, mask.key}, other);
  for (int64_t r = 0; r < 37; ++r)
    for (int64_t c = 0; c < 129; ++c) ASSERT_EQ(at(other, r, c), at(z, r, c));
  EXPECT_THROW(ops::dropout(x, {1.0f, 0}, other), Error);
}

TEST(TrainOps, AddScaledAndScaleOnStridedRows) {
  Tensor x = random_f32(9, 31, 2), y0 = random_f32(9, 31, 3);
  Tensor y = padded(y0, 4);
  ops::add_scaled(padded(x, 2), 0.75f, y);
  for (int64_t r = 0; r < 9; ++r)
    for (int64_t c = 0; c < 31; ++c) ASSERT_EQ(at(y, r, c), at(y0, r, c) + 0.75f * at(x, r, c));
  ops::scale(y, -2.0f);
  for (int64_t r = 0; r < 9; ++r)
    for (int64_t c = 0; c < 31; ++c) ASSERT_EQ(at(y, r, c), -2.0f * (at(y0, r, c) + 0.75f * at(x, r, c)));
  Tensor wrong = Tensor::zeros(DType::F32, {9, 30});
  EXPECT_THROW(ops::add_scaled(x, 1.0f, wrong), Error);
}

TEST(TrainOps, GatherAndOrderedScatterWithRepeatedRows) {
  Tensor src = random_f32(11, 19, 4);
  const std::vector<int32_t> rows = {3, 0, 10, 3, 7, 3};
  Tensor g = Tensor::zeros(DType::F32, {6, 19});
  ops::gather_rows(src, rows, g);
  for (size_t i = 0; i < rows.size(); ++i)
    for (int64_t c = 0; c < 19; ++c) ASSERT_EQ(at(g, int64_t(i), c), at(src, rows[i], c));
  Tensor dst0 = random_f32(11, 19, 5);
  Tensor dst = padded(dst0, 1);
  ops::scatter_add_rows(g, rows, dst);
  for (int64_t r = 0; r < 11; ++r) {
    for (int64_t c = 0; c < 19; ++c) {
      float want = at(dst0, r, c);
      for (size_t i = 0; i < rows.size(); ++i)
        if (rows[i] == r) want += at(g, int64_t(i), c);  // ascending i: the defined order
      ASSERT_EQ(at(dst, r, c), want) << r << "," << c;
    }
  }
  const std::vector<int32_t> bad = {11};
  Tensor one = Tensor::zeros(DType::F32, {1, 19});
  EXPECT_THROW(ops::gather_rows(src, bad, one), Error);
}

struct HeadReference {
  std::vector<double> lse, logp;
  Tensor d_hidden;  // f32 [n, H]
};

// Full logits in double: lse, logp and dh = Σ_v d_logp (1[v=t] − p_v) w_v.
HeadReference head_reference(const Tensor& h, const Tensor& w_f32, const std::vector<int32_t>& targets,
                             const std::vector<float>& d_logp) {
  const int64_t n = h.dim(0), H = h.dim(1), V = w_f32.dim(0);
  HeadReference ref{std::vector<double>(size_t(n)), std::vector<double>(size_t(n)), Tensor::zeros(DType::F32, {n, H})};
  std::vector<double> z(static_cast<size_t>(V)), dh(static_cast<size_t>(H));
  for (int64_t i = 0; i < n; ++i) {
    double mx = -INFINITY;
    for (int64_t v = 0; v < V; ++v) {
      double s = 0;
      for (int64_t e = 0; e < H; ++e) s += double(at(h, i, e)) * at(w_f32, v, e);
      z[size_t(v)] = s;
      mx = std::max(mx, s);
    }
    double sum = 0;
    for (int64_t v = 0; v < V; ++v) sum += std::exp(z[size_t(v)] - mx);
    const double lse = mx + std::log(sum);
    ref.lse[size_t(i)] = lse;
    ref.logp[size_t(i)] = z[size_t(targets[size_t(i)])] - lse;
    std::fill(dh.begin(), dh.end(), 0.0);
    for (int64_t v = 0; v < V; ++v) {
      const double dz = d_logp[size_t(i)] * ((v == targets[size_t(i)] ? 1.0 : 0.0) - std::exp(z[size_t(v)] - lse));
      for (int64_t e = 0; e < H; ++e) dh[size_t(e)] += dz * at(w_f32, v, e);
    }
    for (int64_t e = 0; e < H; ++e) ref.d_hidden.row_as<float>(i)[e] = float(dh[size_t(e)]);
  }
  return ref;
}

TEST(TrainOps, LogpHeadMatchesFullLogitsInDouble) {
  const int64_t n = 13, H = 64, V = 1003;
  Tensor h = random_f32(n, H, 6);
  Tensor w = random_f32(V, H, 7, 3.0f / std::sqrt(float(H)));  // logits spread over ~±10
  std::vector<int32_t> targets(static_cast<size_t>(n));
  std::vector<float> d_logp(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    targets[size_t(i)] = int32_t((i * 389 + 5) % V);
    d_logp[size_t(i)] = 0.3f - 0.05f * float(i);
  }
  targets[0] = 0;
  targets[1] = int32_t(V - 1);  // first and last vocabulary rows
  const HeadReference ref = head_reference(h, w, targets, d_logp);
  for (DType wtype : {DType::F32, DType::Q8_0}) {
    // A quantized head is compared with the reference of its own decoded values.
    Tensor wq = wtype == DType::F32 ? w : ops::convert(w, wtype);
    const HeadReference qref =
        wtype == DType::F32 ? ref : head_reference(h, ops::convert(wq, DType::F32), targets, d_logp);
    for (int64_t chunk : {int64_t(1), int64_t(256), int64_t(1003), int64_t(5000)}) {
      SCOPED_TRACE(testing::Message() << dtype_name(wtype) << " chunk " << chunk);
      // f32: float accumulation against double (chunk 1 sums 1,003 one-term
      // chunks). Q8_0: the CPU matmul also rounds h to int8 per 32 values
      // (NMSE ≈ 2e-5 per product), ~2e-3 relative on the logits.
      const bool quant = wtype != DType::F32;
      const double value_tol = quant ? 5e-3 : 2e-5, grad_nmse = quant ? 1e-4 : 1e-9;
      const ops::LogpHeadArgs args{.hidden = h, .weight = wq, .targets = targets, .chunk = chunk};
      Tensor lse = Tensor::zeros(DType::F32, {n}), logp = Tensor::zeros(DType::F32, {n});
      ops::logp_head_forward(args, lse, logp);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_NEAR(lse.data_as<float>()[i], qref.lse[size_t(i)], value_tol * (1 + std::abs(qref.lse[size_t(i)])));
        ASSERT_NEAR(logp.data_as<float>()[i], qref.logp[size_t(i)], value_tol * (1 + std::abs(qref.logp[size_t(i)])));
      }
      Tensor dl = Tensor::zeros(DType::F32, {n});
      std::copy(d_logp.begin(), d_logp.end(), dl.data_as<float>());
      // Accumulate onto a prefilled, row-padded gradient.
      Tensor prefill = random_f32(n, H, 8);
      Tensor dh = padded(prefill, 3);
      ops::logp_head_backward(args, lse, dl, dh, ops::GradWrite::Accumulate);
      double err = 0, norm = 0;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t e = 0; e < H; ++e) {
          const double want = double(at(qref.d_hidden, i, e));
          const double d = double(at(dh, i, e)) - double(at(prefill, i, e)) - want;
          err += d * d;
          norm += want * want;
        }
      EXPECT_LT(err / norm, grad_nmse);
      ops::logp_head_backward(args, lse, dl, dh, ops::GradWrite::Overwrite);
      err = 0;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t e = 0; e < H; ++e) {
          const double d = double(at(dh, i, e)) - double(at(qref.d_hidden, i, e));
          err += d * d;
        }
      EXPECT_LT(err / norm, grad_nmse);
    }
  }
  const std::vector<int32_t> bad(static_cast<size_t>(n), int32_t(V));
  Tensor lse = Tensor::zeros(DType::F32, {n}), logp = Tensor::zeros(DType::F32, {n});
  EXPECT_THROW(ops::logp_head_forward({.hidden = h, .weight = w, .targets = bad, .chunk = 64}, lse, logp), Error);
}

TEST(TrainOps, AdamWMatchesTheReferenceUpdateAndSumOfSquares) {
  struct Slot {
    Tensor p, g, m, v;
    float lr_scale;
  };
  std::vector<Slot> slots;
  for (auto [size, lr_scale] :
       {std::pair{int64_t(1), 1.0f}, std::pair{int64_t(1000), 16.0f}, std::pair{int64_t(777), 1.0f}}) {
    slots.push_back({random_f32(1, size, uint32_t(size)), random_f32(1, size, uint32_t(size + 1), 0.1f),
                     Tensor::zeros(DType::F32, {1, size}), Tensor::zeros(DType::F32, {1, size}), lr_scale});
  }
  // The reference: train::AdamW's loop, in double for the comparison.
  std::vector<std::vector<double>> p, m, v;
  for (auto& s : slots) {
    p.emplace_back(s.p.data_as<float>(), s.p.data_as<float>() + s.p.numel());
    m.emplace_back(size_t(s.p.numel()), 0.0);
    v.emplace_back(size_t(s.p.numel()), 0.0);
  }
  for (int step = 1; step <= 3; ++step) {
    std::vector<ops::AdamWSlot> op_slots;
    std::vector<const Tensor*> grads;
    for (auto& s : slots) {
      op_slots.push_back({&s.p, &s.g, &s.m, &s.v, s.lr_scale});
      grads.push_back(&s.g);
    }
    double want_sq = 0;
    for (auto& s : slots)
      for (int64_t i = 0; i < s.g.numel(); ++i) want_sq += double(s.g.data_as<float>()[i]) * s.g.data_as<float>()[i];
    EXPECT_NEAR(ops::sum_of_squares(grads), want_sq, 1e-12 * want_sq);
    const ops::AdamWStep hyper{.lr = 1e-3f, .weight_decay = 0.01f, .step = step, .grad_scale = 0.5f};
    ops::adamw_step(op_slots, hyper);
    const double c1 = 1 - std::pow(0.9, step), c2 = 1 - std::pow(0.999, step);
    for (size_t k = 0; k < slots.size(); ++k) {
      const double lr = 1e-3 * slots[k].lr_scale;
      for (size_t i = 0; i < p[k].size(); ++i) {
        const double g = 0.5 * slots[k].g.data_as<float>()[i];
        p[k][i] -= lr * 0.01 * p[k][i];
        m[k][i] = 0.9 * m[k][i] + 0.1 * g;
        v[k][i] = 0.999 * v[k][i] + 0.001 * g * g;
        p[k][i] -= lr * (m[k][i] / c1) / (std::sqrt(v[k][i] / c2) + 1e-8);
        ASSERT_NEAR(slots[k].p.data_as<float>()[i], p[k][i], 1e-6 * (1 + std::abs(p[k][i])))
            << "step " << step << " slot " << k << " element " << i;
        ASSERT_NEAR(slots[k].m.data_as<float>()[i], m[k][i], 1e-6 * std::abs(m[k][i]) + 1e-12);
      }
    }
  }
}

}  // namespace
}  // namespace brioche

namespace brioche::ops {
namespace {

// The CPU side of the offloading ops: copy_async is a plain copy there, and
// the checks name both tensors; lora_matmul rejects factors that do not fit.
TEST(TrainOps, CopyAsyncOnTheCpuAndLoraMatmulShapeErrors) {
  Tensor src = Tensor::zeros(DType::F32, {3, 5});
  for (int i = 0; i < 15; ++i) src.data_as<float>()[i] = float(i);
  Tensor dst = pinned_host_zeros(DType::F32, {3, 5});
  PendingCopy pending = copy_async(src, dst);
  pending.wait();
  for (int i = 0; i < 15; ++i) EXPECT_EQ(dst.data_as<float>()[i], float(i));
  Tensor wrong = Tensor::zeros(DType::F32, {5, 3});
  try {
    copy_async(src, wrong);
    FAIL() << "copy_async accepted [3, 5] into [5, 3]";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("must match and be dense"), std::string::npos) << e.what();
  }

  Tensor x = Tensor::zeros(DType::F32, {4, 8}), w = Tensor::zeros(DType::F32, {6, 8}),
         y = Tensor::zeros(DType::F32, {4, 6});
  Tensor a = Tensor::zeros(DType::F32, {2, 7}), b = Tensor::zeros(DType::F32, {6, 2}),
         u = Tensor::zeros(DType::F32, {4, 2});
  const LowRank lr{.a = a, .b = b, .scale = 1.0f};
  const LoraMatmulPart part{w, &lr, y, &u};
  try {
    lora_matmul(x, {&part, 1});
    FAIL() << "lora_matmul accepted A [2, 7] for 8 inputs";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("must be A [r, 8] and B [6, r]"), std::string::npos) << e.what();
  }
  // bf16 activations are for the CUDA tensor-core path only.
  Tensor x16 = Tensor::zeros(DType::BF16, {4, 8});
  const LoraMatmulPart plain{w, nullptr, y, nullptr};
  try {
    lora_matmul(x16, {&plain, 1});
    FAIL() << "lora_matmul took a bf16 x on the CPU";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs the tensor-core path"), std::string::npos) << e.what();
  }
  Tensor gate = Tensor::zeros(DType::F32, {4, 8}), act16 = Tensor::zeros(DType::BF16, {4, 8});
  try {
    swiglu(gate, gate, act16);
    FAIL() << "swiglu wrote bf16 on the CPU";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is for CUDA tensors"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace brioche::ops
