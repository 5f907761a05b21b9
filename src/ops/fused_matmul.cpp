#include "ops/fused_matmul.h"

#include <vector>

#include "backend/cpu/matmul.h"
#include "core/error.h"
#include "ops/add.h"
#include "ops/matmul.h"
#include "ops/matmul_args.h"
#include "ops/swiglu.h"
#if BRIOCHE_CUDA
#include "backend/cuda/kernels.h"
#endif

namespace brioche::ops {

void matmul_accumulate(const Tensor& x, const Tensor& w, Tensor& y, Tensor& scratch) {
  const cpu::MatmulArgs args = detail::matmul_args(x, w, y, "matmul_accumulate");
#if BRIOCHE_CUDA
  if (w.device() == Device::CUDA) return cuda::matmul_accumulate(args);
#endif
  matmul(x, w, scratch);
  add(y, scratch, y);
}

void swiglu_matmul(const Tensor& x, const Tensor& w_gate, const Tensor& w_up, Tensor& out, Tensor& scratch) {
  const cpu::MatmulArgs gate = detail::matmul_args(x, w_gate, out, "swiglu_matmul");
  const cpu::MatmulArgs up = detail::matmul_args(x, w_up, scratch, "swiglu_matmul");
  BRIOCHE_CHECK(w_up.dtype() == w_gate.dtype() && w_up.shape() == w_gate.shape() &&
                    w_up.stride(0) == w_gate.stride(0),
                "swiglu_matmul: gate ", w_gate.describe(), " and up ", w_up.describe(), " weights differ");
#if BRIOCHE_CUDA
  if (w_gate.device() == Device::CUDA) return cuda::matmul_swiglu(gate, up);
#endif
  if (w_gate.device() == Device::CPU) {
    const cpu::MatmulArgs both[] = {gate, up};  // one activation quantization for the two
    cpu::matmul_group(both);
  } else {
    matmul(x, w_gate, out);
    matmul(x, w_up, scratch);
  }
  swiglu(out, scratch, out);
}

void matmul_group(const Tensor& x, std::span<const Tensor* const> ws, std::span<Tensor* const> ys) {
  BRIOCHE_CHECK(ws.size() == ys.size() && !ws.empty() && ws.size() <= 3, "matmul_group: ", ws.size(),
                " weights and ", ys.size(), " outputs (expected 1 to 3 of each)");
  std::vector<cpu::MatmulArgs> parts;
  for (size_t i = 0; i < ws.size(); ++i) parts.push_back(detail::matmul_args(x, *ws[i], *ys[i], "matmul_group"));
#if BRIOCHE_CUDA
  if (ws[0]->device() == Device::CUDA) return cuda::matmul_group(parts);
#endif
  if (ws[0]->device() == Device::CPU) return cpu::matmul_group(parts);  // one activation quantization
  for (size_t i = 0; i < ws.size(); ++i) matmul(x, *ws[i], *ys[i]);
}

}  // namespace brioche::ops
