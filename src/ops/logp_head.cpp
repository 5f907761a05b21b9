#include "ops/logp_head.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/linear_backward.h"
#include "backend/cpu/logp_head.h"
#include "ops/amx_weight_tiles.h"
#include "ops/check_f32.h"
#include "ops/device.h"
#include "ops/matmul.h"
#include "ops/matmul_args.h"
#if BRIOCHE_CUDA
#include "backend/cuda/train_kernels.h"
#endif

namespace brioche::ops {

namespace {

// z = hidden·wᵀ of a vocabulary chunk (CPU): a quantized head on AMX as the
// training layers' products (bf16 tiles, f32 sums), else cpu::matmul.
void chunk_logits(const Tensor& hidden, const Tensor& w, Tensor& z) {
  const cpu::MatmulArgs b = detail::matmul_args(hidden, w, z, "logp_head");
  z.note_written();
  if (!training_matmul_on_amx(w, b)) matmul(hidden, w, z);
}

// Checks shapes and targets; returns hidden's rows.
detail::F32Rows check_head(const LogpHeadArgs& a, const char* op) {
  auto h = detail::f32_rows(a.hidden, op, "hidden");
  BRIOCHE_CHECK(a.weight.defined() && a.weight.rank() == 2 && a.weight.dim(1) == h.dim, op, ": weight must be [V, ",
                h.dim, "], got ", a.weight.defined() ? a.weight.describe() : "undefined");
  BRIOCHE_CHECK(int64_t(a.targets.size()) == h.n_rows, op, ": ", a.targets.size(), " targets for ", h.n_rows,
                " hidden rows");
  BRIOCHE_CHECK(a.chunk > 0, op, ": chunk must be positive, got ", a.chunk);
  const int64_t V = a.weight.dim(0);
  for (size_t i = 0; i < a.targets.size(); ++i) {
    BRIOCHE_CHECK(a.targets[i] >= 0 && a.targets[i] < V, op, ": target token ", a.targets[i], " of row ", i,
                  " outside vocab ", V);
  }
  detail::common_device(op, {&a.hidden, &a.weight});
  return h;
}

float* f32_vector(const Tensor& t, int64_t n, const char* op, const char* what) {
  auto r = detail::f32_rows(t, op, what);
  BRIOCHE_CHECK(r.n_rows * r.dim == n && (r.n_rows == 1 || r.dim == 1 || r.stride == r.dim), op, ": ", what,
                " must hold ", n, " contiguous floats, got ", t.describe());
  return r.data;
}

#if BRIOCHE_CUDA
cuda::LogpHeadDeviceArgs device_args(const LogpHeadArgs& a, const detail::F32Rows& h) {
  return {.hidden = h.data,
          .ldh = h.stride,
          .n = h.n_rows,
          .H = h.dim,
          .wtype = a.weight.dtype(),
          .w = a.weight.data(),
          .w_row_bytes = size_t(a.weight.stride(0)),
          .vocab = a.weight.dim(0),
          .targets = a.targets.data(),
          .chunk = a.chunk};
}
#endif

}  // namespace

void logp_head_forward(const LogpHeadArgs& a, Tensor& lse, Tensor& logp) {
  const auto h = check_head(a, "logp_head_forward");
  const int64_t n = h.n_rows, V = a.weight.dim(0);
  float* lse_out = f32_vector(lse, n, "logp_head_forward", "lse");
  float* logp_out = f32_vector(logp, n, "logp_head_forward", "logp");
  detail::common_device("logp_head_forward", {&a.hidden, &lse, &logp});
  if (n == 0) return;
  if (a.hidden.device() == Device::CUDA) {
#if BRIOCHE_CUDA
    return cuda::logp_head_forward(device_args(a, h), lse_out, logp_out);
#else
    detail::fail_no_cuda("logp_head_forward");
#endif
  }
  std::vector<float> m(size_t(n), -std::numeric_limits<float>::infinity()), s(size_t(n), 0.0f), z_t(size_t(n), 0.0f);
  // [n, chunk]; each chunk's product overwrites the columns it reads
  Tensor logits = uninitialized(DType::F32, {n, std::min(a.chunk, V)}, Device::CPU);
  for (int64_t v0 = 0; v0 < V; v0 += a.chunk) {
    const int64_t v1 = std::min(V, v0 + a.chunk);
    Tensor z = logits.slice(1, 0, v1 - v0);
    chunk_logits(a.hidden, a.weight.slice(0, v0, v1), z);
    backend::cpu::logp_chunk_update({.z = z.data_as<float>(),
                                     .ldz = z.stride(0) / 4,
                                     .n = n,
                                     .width = v1 - v0,
                                     .v0 = v0,
                                     .targets = a.targets.data()},
                                    m.data(), s.data(), z_t.data());
  }
  for (int64_t i = 0; i < n; ++i) {
    lse_out[i] = m[size_t(i)] + std::log(s[size_t(i)]);
    logp_out[i] = z_t[size_t(i)] - lse_out[i];
  }
}

void logp_head_backward(const LogpHeadArgs& a, const Tensor& lse, const Tensor& d_logp, Tensor& d_hidden,
                        GradWrite mode) {
  const auto h = check_head(a, "logp_head_backward");
  const int64_t n = h.n_rows, V = a.weight.dim(0);
  const float* lse_in = f32_vector(lse, n, "logp_head_backward", "lse");
  const float* d_logp_in = f32_vector(d_logp, n, "logp_head_backward", "d_logp");
  auto dh = detail::f32_rows(d_hidden, "logp_head_backward", "d_hidden");
  BRIOCHE_CHECK(dh.n_rows == n && dh.dim == h.dim, "logp_head_backward: d_hidden must be [", n, ", ", h.dim, "], got ",
                d_hidden.describe());
  detail::common_device("logp_head_backward", {&a.hidden, &lse, &d_logp, &d_hidden});
  if (n == 0) return;
  if (a.hidden.device() == Device::CUDA) {
#if BRIOCHE_CUDA
    return cuda::logp_head_backward(device_args(a, h), lse_in, d_logp_in, dh.data, dh.stride,
                                    mode == GradWrite::Accumulate);
#else
    detail::fail_no_cuda("logp_head_backward");
#endif
  }
  Tensor logits = uninitialized(DType::F32, {n, std::min(a.chunk, V)}, Device::CPU);  // [n, chunk], as above
  for (int64_t v0 = 0; v0 < V; v0 += a.chunk) {
    const int64_t v1 = std::min(V, v0 + a.chunk);
    Tensor z = logits.slice(1, 0, v1 - v0);
    Tensor w_chunk = a.weight.slice(0, v0, v1);
    chunk_logits(a.hidden, w_chunk, z);
    backend::cpu::logp_chunk_grad({.z = z.data_as<float>(),
                                   .ldz = z.stride(0) / 4,
                                   .n = n,
                                   .width = v1 - v0,
                                   .v0 = v0,
                                   .targets = a.targets.data()},
                                  lse_in, d_logp_in);
    const bool first = v0 == 0;
    matmul_input_grad(z, w_chunk, d_hidden,
                      first && mode == GradWrite::Overwrite ? GradWrite::Overwrite : GradWrite::Accumulate);
  }
}

}  // namespace brioche::ops
