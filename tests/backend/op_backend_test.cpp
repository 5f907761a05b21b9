// One op × backend harness (llama.cpp's test-backend-ops is the model): a
// registry of cases {op, shape, dtype, error bounds, has gradient}, each run
// through the public ops/ interface on every backend:
//   * CPU: against a double-precision reference written here (the oracle);
//   * CUDA: against the CPU op on the same inputs (itself checked as above).
//     Without a GPU, or in the CPU build, each CUDA case reports
//     "skipped: no CUDA device" (GTEST_SKIP), so the gap is visible.
// Cases with a gradient also run their backward op: on the CPU against
// central finite differences of the double reference, on CUDA against the
// CPU backward.
//
// Error measure: NMSE = Σ(y − ref)² / Σ ref² over the whole output (as
// tests/backend/cuda_ops_test.cpp, whose bounds these are):
//   * f32 arithmetic on both sides (norms, RoPE, SwiGLU, softmax): CPU
//     against double < 1e-10, CUDA against CPU < 1e-10;
//   * add, add_bias: one rounding either way: < 1e-12 (bit-exact in practice);
//   * matmul over f32 weights: < 1e-10; over 16-bit and quantized weights the
//     CPU and the GPU's GEMV round x to 16 bits or to int8 per 32-value block
//     (expected NMSE ≈ 2e-5) and the GPU's GEMM above 8 rows rounds x and w to
//     bf16 (2^-9 relative each): < 1e-4 against the double reference of the
//     dequantized weight, and < 1e-3 between the backends (each side ≤ 1e-4
//     off the reference: the difference is under 4 × that);
//   * backward against finite differences in double (h ≈ 1e-4 relative,
//     exact in f32; truncation O(h²)): < 1e-8, each ref² of the denominator
//     floored by 1e-6: a gradient that is ~0 by cancellation in f32 (the
//     one-column RMSNorm's, ~eps/x³) is compared at that scale; CUDA
//     backward against CPU: < 1e-10.
// Sentinels: every output is the first rows of a buffer with one more row of
// kSentinel, which the op must leave as it is, and its own rows start as NaN,
// so a row the op does not write fails the finiteness check.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/quant_ref.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "ops/add.h"
#include "ops/gelu_tanh.h"
#include "ops/device.h"
#include "ops/layer_backward.h"
#include "ops/matmul.h"
#include "ops/moe.h"
#include "ops/rms_norm.h"
#include "ops/rope.h"
#include "ops/softcap.h"
#include "ops/softmax.h"
#include "ops/swiglu.h"

namespace brioche {
namespace {

constexpr float kSentinel = -12345.678f;

enum class Backend { Cpu, Cuda };

// A case's inputs on one device; `out` gets the op's output.
using Forward = std::function<void(const std::vector<Tensor>& in, Tensor& out)>;
// The output in double, from the host inputs.
using Reference = std::function<std::vector<double>(const std::vector<Tensor>& in)>;
// Gradients of Σ out ⊙ dout with respect to the first `n_grads` inputs
// (each shaped as its input), from inputs and dout on one device.
using Backward = std::function<void(const std::vector<Tensor>& in, const Tensor& dout, std::vector<Tensor>& grads)>;

struct OpCase {
  std::string op;
  std::string name;            // op_shape_dtype, a test name
  std::vector<Tensor> inputs;  // on the host
  int64_t out_rows = 0, out_cols = 0;
  // The first input is read as a view whose rows are this many floats
  // apart beyond its width (a strided view, as a column slice of a wider
  // buffer is); 0: contiguous.
  int64_t input_pad = 0;
  double cpu_bound = 0;     // NMSE of the CPU op against the double reference
  double device_bound = 0;  // NMSE of another backend against the CPU op
  Forward forward;
  Reference reference;
  bool has_gradient = false;
  int n_grads = 0;  // inputs the backward differentiates (float inputs first)
  Backward backward;
};

Tensor normal_f32(int64_t rows, int64_t cols, uint32_t seed, float scale = 1.0f) {
  Tensor t = Tensor::zeros(DType::F32, {rows, cols});
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  for (int64_t i = 0; i < rows * cols; ++i) t.data_as<float>()[i] = dist(rng);
  return t;
}

double at(const Tensor& t, int64_t i) { return double(t.data_as<float>()[i]); }

// An output of [rows, cols] f32 on `device`: rows of NaN, then a sentinel row.
struct GuardedOutput {
  Tensor buffer;  // [rows + 1, cols]
  Tensor view;    // its first rows
};
GuardedOutput guarded_output(int64_t rows, int64_t cols, Device device) {
  Tensor host = Tensor::zeros(DType::F32, {rows + 1, cols});
  float* p = host.data_as<float>();
  for (int64_t i = 0; i < rows * cols; ++i) p[i] = std::numeric_limits<float>::quiet_NaN();
  for (int64_t i = rows * cols; i < (rows + 1) * cols; ++i) p[i] = kSentinel;
  Tensor buffer = ops::to_device(host, device);
  Tensor view = buffer.slice(0, 0, rows);
  return {buffer, view};
}

// The output's rows on the host, after checking the sentinel row survived.
Tensor host_rows(const GuardedOutput& out) {
  const Tensor all = ops::to_device(out.buffer, Device::CPU);
  const int64_t rows = all.dim(0) - 1, cols = all.dim(1);
  for (int64_t c = 0; c < cols; ++c)
    EXPECT_EQ(all.row_as<float>(rows)[c], kSentinel) << "sentinel after the output overwritten at column " << c;
  Tensor rows_only = Tensor::zeros(DType::F32, {rows, cols});
  std::memcpy(rows_only.data(), all.data(), size_t(rows * cols) * sizeof(float));
  return rows_only;
}

// NMSE of y against ref; non-finite values of y fail (an unwritten NaN row).
// `floor` is added to each ref² of the denominator (see the gradients).
double nmse(const Tensor& y, const std::vector<double>& ref, double floor = 0) {
  EXPECT_EQ(size_t(y.numel()), ref.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size() && i < size_t(y.numel()); ++i) {
    const double v = at(y, int64_t(i));
    if (!std::isfinite(v)) {
      ADD_FAILURE() << "non-finite output " << v << " at " << i;
      return INFINITY;
    }
    num += (v - ref[i]) * (v - ref[i]);
    den += ref[i] * ref[i] + floor;
  }
  return den > 0 ? num / den : num;
}

std::vector<double> as_double(const Tensor& t) {
  std::vector<double> v(size_t(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[size_t(i)] = at(t, i);
  return v;
}

// The inputs on `device`, the first as a row-padded view (OpCase::input_pad).
std::vector<Tensor> on_device(const std::vector<Tensor>& host, Device device, int64_t input_pad = 0) {
  std::vector<Tensor> out;
  for (const Tensor& t : host) out.push_back(ops::to_device(t, device));
  if (input_pad > 0) {
    const Tensor& x = host[0];
    const int64_t rows = x.dim(0), cols = x.dim(1);
    Tensor wide = Tensor::zeros(DType::F32, {rows, cols + input_pad});
    for (int64_t r = 0; r < rows; ++r) std::memcpy(wide.row_as<float>(r), x.row_as<float>(r), size_t(cols) * 4);
    out[0] = ops::to_device(wide, device).slice(1, 0, cols);
  }
  return out;
}

// ------------------------------------------------------------ the registry

struct Shape2 {
  int64_t rows, cols;
};
// Odd row counts and widths (one element, one SIMD lane short, past a warp).
constexpr Shape2 kRowShapes[] = {{1, 1}, {1, 7}, {3, 33}, {5, 576}, {17, 1023}, {64, 129}};

std::string shape_name(Shape2 s) { return std::to_string(s.rows) + "x" + std::to_string(s.cols); }

void add_rms_norm(std::vector<OpCase>& cases, Shape2 s) {
  constexpr float kEps = 1e-5f;
  OpCase c{.op = "rms_norm",
           .name = "rms_norm_" + shape_name(s),
           .inputs = {normal_f32(s.rows, s.cols, 1, 3.0f), normal_f32(1, s.cols, 2).reshape({s.cols})},
           .out_rows = s.rows,
           .out_cols = s.cols,
           .input_pad = 5,
           .cpu_bound = 1e-10,
           .device_bound = 1e-10};
  c.forward = [](const std::vector<Tensor>& in, Tensor& out) { ops::rms_norm(in[0], in[1], kEps, out); };
  c.reference = [s](const std::vector<Tensor>& in) {
    std::vector<double> y(size_t(s.rows * s.cols));
    for (int64_t r = 0; r < s.rows; ++r) {
      double ss = 0;
      for (int64_t j = 0; j < s.cols; ++j) ss += at(in[0], r * s.cols + j) * at(in[0], r * s.cols + j);
      const double inv = 1.0 / std::sqrt(ss / double(s.cols) + double(kEps));
      for (int64_t j = 0; j < s.cols; ++j) y[size_t(r * s.cols + j)] = at(in[0], r * s.cols + j) * inv * at(in[1], j);
    }
    return y;
  };
  c.has_gradient = true;
  c.n_grads = 1;  // the norm weight is frozen (ops/layer_backward.h)
  c.backward = [](const std::vector<Tensor>& in, const Tensor& dout, std::vector<Tensor>& grads) {
    ops::rms_norm_backward(in[0], in[1], kEps, dout, grads[0]);  // (accumulates into zeros)
  };
  cases.push_back(std::move(c));
}

void add_swiglu(std::vector<OpCase>& cases, Shape2 s) {
  OpCase c{.op = "swiglu",
           .name = "swiglu_" + shape_name(s),
           .inputs = {normal_f32(s.rows, s.cols, 5, 4.0f), normal_f32(s.rows, s.cols, 6)},
           .out_rows = s.rows,
           .out_cols = s.cols,
           .input_pad = 3,
           .cpu_bound = 1e-10,
           .device_bound = 1e-10};
  c.forward = [](const std::vector<Tensor>& in, Tensor& out) { ops::swiglu(in[0], in[1], out); };
  c.reference = [](const std::vector<Tensor>& in) {
    std::vector<double> y(size_t(in[0].numel()));
    for (size_t i = 0; i < y.size(); ++i) {
      const double g = at(in[0], int64_t(i));
      y[i] = g / (1 + std::exp(-g)) * at(in[1], int64_t(i));
    }
    return y;
  };
  c.has_gradient = true;
  c.n_grads = 2;
  c.backward = [](const std::vector<Tensor>& in, const Tensor& dout, std::vector<Tensor>& grads) {
    ops::swiglu_backward(in[0], in[1], dout, grads[0], grads[1]);
  };
  cases.push_back(std::move(c));
}

void add_softmax(std::vector<OpCase>& cases, Shape2 s) {
  OpCase c{.op = "softmax",
           .name = "softmax_" + shape_name(s),
           .inputs = {normal_f32(s.rows, s.cols, 7, 10.0f)},
           .out_rows = s.rows,
           .out_cols = s.cols,
           .input_pad = 2,
           .cpu_bound = 1e-10,
           .device_bound = 1e-10};
  c.forward = [](const std::vector<Tensor>& in, Tensor& out) {
    ops::copy(in[0], out);
    ops::softmax(out);
  };
  c.reference = [s](const std::vector<Tensor>& in) {
    std::vector<double> y(size_t(s.rows * s.cols));
    for (int64_t r = 0; r < s.rows; ++r) {
      double max = -INFINITY, sum = 0;
      for (int64_t j = 0; j < s.cols; ++j) max = std::max(max, at(in[0], r * s.cols + j));
      for (int64_t j = 0; j < s.cols; ++j) sum += std::exp(at(in[0], r * s.cols + j) - max);
      for (int64_t j = 0; j < s.cols; ++j) y[size_t(r * s.cols + j)] = std::exp(at(in[0], r * s.cols + j) - max) / sum;
    }
    return y;
  };
  cases.push_back(std::move(c));
}

void add_add(std::vector<OpCase>& cases, Shape2 s) {
  OpCase sum{.op = "add",
             .name = "add_" + shape_name(s),
             .inputs = {normal_f32(s.rows, s.cols, 8), normal_f32(s.rows, s.cols, 9)},
             .out_rows = s.rows,
             .out_cols = s.cols,
             .input_pad = 1,
             .cpu_bound = 1e-12,
             .device_bound = 1e-12};
  sum.forward = [](const std::vector<Tensor>& in, Tensor& out) { ops::add(in[0], in[1], out); };
  sum.reference = [](const std::vector<Tensor>& in) {
    std::vector<double> y(size_t(in[0].numel()));
    for (size_t i = 0; i < y.size(); ++i) y[i] = at(in[0], int64_t(i)) + at(in[1], int64_t(i));
    return y;
  };
  cases.push_back(std::move(sum));

  OpCase bias{.op = "add_bias",
              .name = "add_bias_" + shape_name(s),
              .inputs = {normal_f32(s.rows, s.cols, 8), normal_f32(1, s.cols, 10).reshape({s.cols})},
              .out_rows = s.rows,
              .out_cols = s.cols,
              .input_pad = 4,
              .cpu_bound = 1e-12,
              .device_bound = 1e-12};
  bias.forward = [](const std::vector<Tensor>& in, Tensor& out) {
    ops::copy(in[0], out);
    ops::add_bias(out, in[1]);
  };
  bias.reference = [s](const std::vector<Tensor>& in) {
    std::vector<double> y(size_t(s.rows * s.cols));
    for (int64_t i = 0; i < s.rows * s.cols; ++i) y[size_t(i)] = at(in[0], i) + at(in[1], i % s.cols);
    return y;
  };
  cases.push_back(std::move(bias));
}

// Gemma's element-wise ops: the GELU (tanh form) gate, soft-capping and the
// per-row weights of the MoE experts' outputs, f32 on both sides: < 1e-10,
// except the GELU's 1 + tanh(·), which cancels for negative gates (a lone
// value of gate -3 is ~1e-4 relative off in f32): < 1e-7 there.
void add_gemma_rows(std::vector<OpCase>& cases, Shape2 s) {
  OpCase gelu{.op = "gelu_tanh_mul",
              .name = "gelu_tanh_mul_" + shape_name(s),
              .inputs = {normal_f32(s.rows, s.cols, 11, 3.0f), normal_f32(s.rows, s.cols, 12)},
              .out_rows = s.rows,
              .out_cols = s.cols,
              .input_pad = 3,
              .cpu_bound = 1e-7,
              .device_bound = 1e-7};
  gelu.forward = [](const std::vector<Tensor>& in, Tensor& out) { ops::gelu_tanh_mul(in[0], in[1], out); };
  gelu.reference = [](const std::vector<Tensor>& in) {
    std::vector<double> y(size_t(in[0].numel()));
    for (size_t i = 0; i < y.size(); ++i) {
      const double g = at(in[0], int64_t(i));
      y[i] = 0.5 * g * (1 + std::tanh(std::sqrt(2 / M_PI) * (g + 0.044715 * g * g * g))) * at(in[1], int64_t(i));
    }
    return y;
  };
  cases.push_back(std::move(gelu));

  constexpr float kCap = 8.0f;
  OpCase cap{.op = "softcap",
             .name = "softcap_" + shape_name(s),
             .inputs = {normal_f32(s.rows, s.cols, 13, 12.0f)},
             .out_rows = s.rows,
             .out_cols = s.cols,
             .input_pad = 2,
             .cpu_bound = 1e-10,
             .device_bound = 1e-10};
  cap.forward = [](const std::vector<Tensor>& in, Tensor& out) {
    ops::copy(in[0], out);
    ops::softcap(out, kCap);
  };
  cap.reference = [](const std::vector<Tensor>& in) {
    std::vector<double> y(size_t(in[0].numel()));
    for (size_t i = 0; i < y.size(); ++i) y[i] = kCap * std::tanh(at(in[0], int64_t(i)) / kCap);
    return y;
  };
  cases.push_back(std::move(cap));

  auto scales = std::make_shared<std::vector<float>>();
  for (int64_t r = 0; r < s.rows; ++r) scales->push_back(0.25f + 0.5f * float(r % 5) - (r % 2 ? 1.5f : 0.0f));
  OpCase rows{.op = "scale_rows",
              .name = "scale_rows_" + shape_name(s),
              .inputs = {normal_f32(s.rows, s.cols, 14)},
              .out_rows = s.rows,
              .out_cols = s.cols,
              .input_pad = 1,
              .cpu_bound = 1e-12,
              .device_bound = 1e-12};
  rows.forward = [scales](const std::vector<Tensor>& in, Tensor& out) {
    ops::copy(in[0], out);
    ops::scale_rows(out, *scales);  // host scales (the CUDA launcher uploads them)
  };
  rows.reference = [scales, s](const std::vector<Tensor>& in) {
    std::vector<double> y(size_t(s.rows * s.cols));
    for (int64_t i = 0; i < s.rows * s.cols; ++i) y[size_t(i)] = at(in[0], i) * double((*scales)[size_t(i / s.cols)]);
    return y;
  };
  cases.push_back(std::move(rows));
}

// RoPE over rows of n_heads heads of 64 at positions up to 100,000 (long
// contexts: the angle's argument reduction).
void add_rope(std::vector<OpCase>& cases, ops::RopeStyle style, int64_t rows, int n_heads) {
  constexpr int kHeadDim = 64;
  static const std::vector<float> inv_freq = ops::rope_inv_freq(kHeadDim, 500000.0f, {});
  const int64_t cols = int64_t(n_heads) * kHeadDim;
  auto positions = std::make_shared<std::vector<int32_t>>();
  for (int64_t r = 0; r < rows; ++r) positions->push_back(int32_t((r * 7919) % 100000));
  const ops::RopeParams params{.style = style, .n_heads = n_heads, .head_dim = kHeadDim, .inv_freq = inv_freq};
  const bool neox = style == ops::RopeStyle::NeoX;
  OpCase c{.op = "rope",
           .name = std::string("rope_") + (neox ? "neox_" : "interleaved_") + shape_name({rows, cols}),
           .inputs = {normal_f32(rows, cols, 11)},
           .out_rows = rows,
           .out_cols = cols,
           .cpu_bound = 1e-10,
           .device_bound = 1e-9};  // (cuda_ops_test's RoPE bound: the GPU's sincosf at long positions)
  c.forward = [positions, params](const std::vector<Tensor>& in, Tensor& out) {
    ops::copy(in[0], out);
    ops::rope(out, *positions, params);
  };
  c.reference = [positions, rows, n_heads, neox](const std::vector<Tensor>& in) {
    std::vector<double> y = as_double(in[0]);
    for (int64_t r = 0; r < rows; ++r)
      for (int h = 0; h < n_heads; ++h)
        for (int i = 0; i < kHeadDim / 2; ++i) {
          const int64_t base = (r * n_heads + h) * kHeadDim;
          const int64_t a = base + (neox ? i : 2 * i), b = base + (neox ? i + kHeadDim / 2 : 2 * i + 1);
          // The op's angle is p·w rounded to f32 (backend/cpu/rope.cpp): its
          // rotation is the definition; cos and sin in double.
          const double angle = double(float((*positions)[size_t(r)]) * inv_freq[size_t(i)]);
          const double xa = at(in[0], a), xb = at(in[0], b);
          y[size_t(a)] = xa * std::cos(angle) - xb * std::sin(angle);
          y[size_t(b)] = xa * std::sin(angle) + xb * std::cos(angle);
        }
    return y;
  };
  c.has_gradient = true;
  c.n_grads = 1;
  c.backward = [positions, params](const std::vector<Tensor>& in, const Tensor& dout, std::vector<Tensor>& grads) {
    (void)in;
    ops::copy(dout, grads[0]);
    ops::rope_backward(grads[0], *positions, params);
  };
  cases.push_back(std::move(c));
}

// y = x·wᵀ, w [m, k] of `wtype` (quantized from normal values on the host).
void add_matmul(std::vector<OpCase>& cases, DType wtype, int64_t n) {
  constexpr int64_t kM = 96, kK = 512;
  const Tensor source = normal_f32(kM, kK, 13);
  Tensor w = Tensor::zeros(wtype, {kM, kK});
  const size_t rb = row_bytes(wtype, kK);
  auto dequantized = std::make_shared<std::vector<float>>(size_t(kM * kK));
  for (int64_t r = 0; r < kM; ++r) {
    uint8_t* row = static_cast<uint8_t*>(w.data()) + size_t(r) * rb;
    if (wtype == DType::F32)
      std::memcpy(row, source.row_as<float>(r), size_t(kK) * sizeof(float));
    else
      cpu::quantize_row_ref(wtype, source.row_as<float>(r), row, kK);
    cpu::dequantize_row_ref(wtype, row, dequantized->data() + r * kK, kK);
  }
  const bool exact = wtype == DType::F32;
  OpCase c{.op = "matmul",
           .name = "matmul_" + std::string(dtype_name(wtype)) + "_n" + std::to_string(n),
           .inputs = {normal_f32(n, kK, 14), w},
           .out_rows = n,
           .out_cols = kM,
           .cpu_bound = exact ? 1e-10 : 1e-4,
           .device_bound = exact && n <= 8 ? 1e-10 : 1e-3};
  c.forward = [](const std::vector<Tensor>& in, Tensor& out) { ops::matmul(in[0], in[1], out); };
  c.reference = [dequantized, n](const std::vector<Tensor>& in) {
    std::vector<double> y(size_t(n * kM));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < kM; ++j) {
        double sum = 0;
        for (int64_t t = 0; t < kK; ++t) sum += at(in[0], i * kK + t) * double((*dequantized)[size_t(j * kK + t)]);
        y[size_t(i * kM + j)] = sum;
      }
    return y;
  };
  cases.push_back(std::move(c));
}

// The MoE experts' decode matmul: y[p] = x[x_rows[p]]·w[expert[p]]ᵀ over 7
// (row, expert) pairs of 5 experts [38, k] of `wtype` (k 48 for the dense
// types: not a multiple of a warp; 64 for the quantized ones).
void add_expert_matmul(std::vector<OpCase>& cases, DType wtype) {
  constexpr int64_t kE = 5, kM = 38;
  const bool dense = wtype == DType::F32 || wtype == DType::F16 || wtype == DType::BF16;
  const int64_t k = dense ? 48 : 64;
  static const std::vector<int32_t> x_rows = {0, 0, 1, 2, 2, 1, 0}, experts = {4, 1, 0, 4, 2, 3, 1};
  const Tensor source = normal_f32(kE * kM, k, 15);
  Tensor w = Tensor::zeros(wtype, {kE, kM, k});
  const size_t rb = row_bytes(wtype, k);
  auto dequantized = std::make_shared<std::vector<float>>(size_t(kE * kM * k));
  for (int64_t r = 0; r < kE * kM; ++r) {
    uint8_t* row = static_cast<uint8_t*>(w.data()) + size_t(r) * rb;
    if (wtype == DType::F32)
      std::memcpy(row, source.row_as<float>(r), size_t(k) * sizeof(float));
    else
      cpu::quantize_row_ref(wtype, source.row_as<float>(r), row, k);
    cpu::dequantize_row_ref(wtype, row, dequantized->data() + r * k, k);
  }
  const int64_t pairs = int64_t(x_rows.size());
  OpCase c{.op = "expert_matmul",
           .name = "expert_matmul_" + std::string(dtype_name(wtype)),
           .inputs = {normal_f32(3, k, 16), w},
           .out_rows = pairs,
           .out_cols = kM,
           .cpu_bound = wtype == DType::F32 ? 1e-10 : 1e-4,
           .device_bound = wtype == DType::F32 ? 1e-10 : 1e-3};
  c.forward = [](const std::vector<Tensor>& in, Tensor& out) {
    ops::expert_matmul(in[0], x_rows, in[1], experts, out);
  };
  c.reference = [dequantized, k, pairs](const std::vector<Tensor>& in) {
    std::vector<double> y(size_t(pairs * kM));
    for (int64_t p = 0; p < pairs; ++p)
      for (int64_t j = 0; j < kM; ++j) {
        double sum = 0;
        const float* wr = dequantized->data() + (experts[size_t(p)] * kM + j) * k;
        for (int64_t t = 0; t < k; ++t) sum += at(in[0], x_rows[size_t(p)] * k + t) * double(wr[t]);
        y[size_t(p * kM + j)] = sum;
      }
    return y;
  };
  cases.push_back(std::move(c));
}

const std::vector<OpCase>& registry() {
  static const std::vector<OpCase> cases = [] {
    std::vector<OpCase> all;
    for (Shape2 s : kRowShapes) {
      add_rms_norm(all, s);
      add_swiglu(all, s);
      add_softmax(all, s);
      add_add(all, s);
      add_gemma_rows(all, s);
    }
    for (ops::RopeStyle style : {ops::RopeStyle::Interleaved, ops::RopeStyle::NeoX}) {
      add_rope(all, style, 1, 1);
      add_rope(all, style, 5, 3);
      add_rope(all, style, 33, 8);
    }
    // 1 and 3 rows: the GPU's GEMV (≤ 8 rows); 17: its GEMM.
    for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q4_K,
                    DType::Q5_K, DType::Q6_K, DType::AFFINE4_G32, DType::AFFINE4_G64, DType::AFFINE4_G128,
                    DType::AFFINE8_G32, DType::AFFINE8_G64, DType::AFFINE8_G128})
      for (int64_t n : {1, 3, 17}) add_matmul(all, t, n);
    for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::AFFINE4_G64})
      add_expert_matmul(all, t);
    return all;
  }();
  return cases;
}

// ------------------------------------------------------------ the harness

// The op's output on `device`, on the host (sentinels checked).
Tensor run_forward(const OpCase& c, Device device) {
  const std::vector<Tensor> in = on_device(c.inputs, device, c.input_pad);
  GuardedOutput out = guarded_output(c.out_rows, c.out_cols, device);
  c.forward(in, out.view);
  return host_rows(out);
}

// The backward's gradients for a fixed cotangent, on the host.
std::vector<Tensor> run_backward(const OpCase& c, const Tensor& dout, Device device) {
  const std::vector<Tensor> in = on_device(c.inputs, device);
  std::vector<Tensor> grads;
  for (int i = 0; i < c.n_grads; ++i)
    grads.push_back(ops::zeros(DType::F32, {c.inputs[size_t(i)].dim(0), c.inputs[size_t(i)].dim(1)}, device));
  c.backward(in, ops::to_device(dout, device), grads);
  std::vector<Tensor> host;
  for (const Tensor& g : grads) host.push_back(ops::to_device(g, Device::CPU));
  return host;
}

// The elements whose gradient is checked: all of a small input, else 1,024
// spread over it (each costs two reference forwards).
std::vector<int64_t> checked_elements(int64_t numel) {
  const int64_t step = std::max<int64_t>(1, numel / 1024);
  std::vector<int64_t> at;
  for (int64_t i = 0; i < numel; i += step) at.push_back(i);
  return at;
}

// ∂(Σ ref(x) ⊙ dout)/∂x_i of input `which` at `elements`, by central
// differences in double.
std::vector<double> numeric_gradient(const OpCase& c, const Tensor& dout, int which,
                                     const std::vector<int64_t>& elements) {
  std::vector<Tensor> in;
  for (const Tensor& t : c.inputs) {
    Tensor copy = Tensor::zeros(DType::F32, {t.numel()});
    std::memcpy(copy.data(), t.data(), t.nbytes());
    in.push_back(copy.reshape({t.dim(0), t.rank() > 1 ? t.dim(1) : 1}));
  }
  // The reference reads inputs as f32; perturb in f32 by a step that is
  // exact there (h a power of two near 1e-4 · max(1, |x|)).
  std::vector<double> grad;
  float* x = in[size_t(which)].data_as<float>();
  auto loss = [&] {
    const std::vector<double> y = c.reference(in);
    double l = 0;
    for (size_t i = 0; i < y.size(); ++i) l += y[i] * at(dout, int64_t(i));
    return l;
  };
  for (int64_t i : elements) {
    const float x0 = x[i];
    const float h = std::ldexp(1.0f, std::ilogb(std::max(1.0f, std::abs(x0))) - 13);
    x[i] = x0 + h;
    const double up = loss();
    x[i] = x0 - h;
    const double down = loss();
    x[i] = x0;
    grad.push_back((up - down) / (2.0 * double(h)));
  }
  return grad;
}

class OpBackend : public testing::TestWithParam<std::tuple<size_t, Backend>> {};

TEST_P(OpBackend, MatchesReference) {
  const auto [index, backend] = GetParam();
  const OpCase& c = registry()[index];
  if (backend == Backend::Cuda && !ops::cuda_available()) GTEST_SKIP() << "skipped: no CUDA device";
  const Tensor cpu = run_forward(c, Device::CPU);
  if (backend == Backend::Cpu) {
    EXPECT_LT(nmse(cpu, c.reference(c.inputs)), c.cpu_bound) << c.name << " on the CPU against double";
  } else {
    EXPECT_LT(nmse(run_forward(c, Device::CUDA), as_double(cpu)), c.device_bound)
        << c.name << " on CUDA against the CPU";
  }
  if (!c.has_gradient) return;
  const Tensor dout = normal_f32(c.out_rows, c.out_cols, 99);
  const std::vector<Tensor> cpu_grads = run_backward(c, dout, Device::CPU);
  for (int i = 0; i < c.n_grads; ++i) {
    if (backend == Backend::Cpu) {
      const Tensor& got = cpu_grads[size_t(i)];
      const std::vector<int64_t> elements = checked_elements(got.numel());
      Tensor sampled = Tensor::zeros(DType::F32, {int64_t(elements.size())});
      for (size_t e = 0; e < elements.size(); ++e) sampled.data_as<float>()[e] = got.data_as<float>()[elements[e]];
      EXPECT_LT(nmse(sampled, numeric_gradient(c, dout, i, elements), 1e-6), 1e-8)
          << c.name << ": gradient of input " << i << " against finite differences";
    } else {
      const std::vector<Tensor> grads = run_backward(c, dout, Device::CUDA);
      EXPECT_LT(nmse(grads[size_t(i)], as_double(cpu_grads[size_t(i)])), 1e-10)
          << c.name << ": gradient of input " << i << " on CUDA against the CPU";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Registry, OpBackend,
                         testing::Combine(testing::Range<size_t>(0, registry().size()),
                                          testing::Values(Backend::Cpu, Backend::Cuda)),
                         [](const testing::TestParamInfo<OpBackend::ParamType>& info) {
                           const OpCase& c = registry()[std::get<0>(info.param)];
                           std::string name = c.name + (std::get<1>(info.param) == Backend::Cpu ? "_cpu" : "_cuda");
                           for (char& ch : name)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return name;
                         });

// The registry holds every op this harness knows, with bounds and some
// gradients: a new case is one add_* call above.
TEST(OpBackendRegistry, CoversItsOps) {
  std::vector<std::string> ops_seen;
  int gradients = 0;
  for (const OpCase& c : registry()) {
    if (std::find(ops_seen.begin(), ops_seen.end(), c.op) == ops_seen.end()) ops_seen.push_back(c.op);
    gradients += c.has_gradient;
    EXPECT_GT(c.cpu_bound, 0) << c.name;
    EXPECT_GT(c.device_bound, 0) << c.name;
    EXPECT_EQ(c.has_gradient, c.backward != nullptr) << c.name;
  }
  EXPECT_EQ(ops_seen, (std::vector<std::string>{"rms_norm", "swiglu", "softmax", "add", "add_bias", "gelu_tanh_mul",
                                                "softcap", "scale_rows", "rope", "matmul", "expert_matmul"}));
  EXPECT_GT(gradients, 0);
}

}  // namespace
}  // namespace brioche
