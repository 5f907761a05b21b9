#include "ops/fused_matmul.h"

#include <optional>
#include <vector>

#include "backend/cpu/matmul.h"
#include "core/error.h"
#include "ops/add.h"
#include "ops/check_f32.h"
#include "ops/lora_rows.h"
#include "ops/matmul.h"
#include "ops/matmul_args.h"
#include "ops/rms_norm.h"
#include "ops/swiglu.h"
#if BRIOCHE_CUDA
#include "backend/cuda/kernels.h"
#endif

namespace brioche::ops {

namespace {

// The backend's arguments of `lora`'s terms for a projection of x writing
// `outputs` (the parts' y must be these, in order).
std::optional<backend::cpu::LoraTableArgs> lora_terms_args(const char* op, const Tensor& x, const LoraTerms* lora,
                                                           std::span<Tensor* const> outputs) {
  if (lora == nullptr) return std::nullopt;
  BRIOCHE_CHECK(lora->parts.size() == outputs.size(), op, ": adapter terms of ", lora->parts.size(),
                " outputs for a projection of ", outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i)
    BRIOCHE_CHECK(lora->parts[i].y == outputs[i], op, ": adapter part ", i, " adds to another tensor than output ", i);
  return detail::lora_table_args(op, x, lora->table, lora->parts, lora->u_scratch);
}

#if BRIOCHE_CUDA
const backend::cpu::LoraTableArgs* or_null(const std::optional<backend::cpu::LoraTableArgs>& args) {
  return args ? &*args : nullptr;
}
#endif

}  // namespace

void matmul_accumulate(const Tensor& x, const Tensor& w, Tensor& y, Tensor& scratch, const AccumulateWith& with) {
  const cpu::MatmulArgs args = detail::matmul_args(x, w, y, "matmul_accumulate");  // (checks on the CPU too)
  Tensor* const outputs[] = {&y};
  const auto terms = lora_terms_args("matmul_accumulate", x, with.lora, outputs);
  BRIOCHE_CHECK(!terms || with.hand_on == nullptr, "matmul_accumulate: adapter terms with a norm handoff (the norm ",
                "would be of y without them)");
  y.note_written();
  HandOnWrite write(with.hand_on, y, "matmul_accumulate");
#if BRIOCHE_CUDA
  if (w.device() == Device::CUDA) {
    cuda::matmul_accumulate(args, {.norm_w = write.norm_w(), .handed = write.slot()}, or_null(terms));
    return write.finish();
  }
#else
  (void)args;
#endif
  // The CPU: the product into scratch (ops::matmul's CPU path, with the
  // read-ahead), then the add.
  scratch.note_written();
  cpu::matmul(detail::matmul_args(x, w, scratch, "matmul_accumulate"), with.read_ahead);
  add(y, scratch, y);
  if (terms) backend::cpu::lora_table_expand(*terms);
  write.finish();
}

namespace {

// The norm of x an op before handed on in norm.handoff, taken and checked
// (ops/norm_handoff.h); null when none was.
std::shared_ptr<void> take_handed(const Tensor& x, const RmsNormFirst& norm, const char* op) {
  return norm.handoff != nullptr ? norm.handoff->take_handed(x, norm.weight, op) : nullptr;
}

#if BRIOCHE_CUDA
// The CUDA launchers' view of `norm` for x (shapes checked as ops::rms_norm
// checks them).
cuda::InputNorm cuda_norm(const Tensor& x, const RmsNormFirst& norm, std::string_view op,
                          const std::shared_ptr<void>& handed) {
  const detail::F32Rows xs = detail::f32_rows(x, op, "x");
  const detail::F32Rows ws = detail::f32_rows(norm.weight, op, "norm weight");
  const detail::F32Rows ns = detail::f32_rows(norm.normed, op, "normed");
  BRIOCHE_CHECK(ws.n_rows == 1 && ws.dim == xs.dim, op, ": norm weight must be [", xs.dim, "], got ",
                norm.weight.describe());
  BRIOCHE_CHECK(ns.n_rows == xs.n_rows && ns.dim == xs.dim, op, ": normed ", norm.normed.describe(),
                " does not match x ", x.describe());
  detail::common_device(op, {&x, &norm.weight, &norm.normed});
  return {.weight = ws.data, .eps = norm.eps, .normed = ns.data, .normed_stride = ns.stride, .handed = handed.get()};
}
#endif

void check_gate_up(const Tensor& w_gate, const Tensor& w_up, std::string_view op) {
  BRIOCHE_CHECK(w_up.dtype() == w_gate.dtype() && w_up.shape() == w_gate.shape() && w_up.stride(0) == w_gate.stride(0),
                op, ": gate ", w_gate.describe(), " and up ", w_up.describe(), " weights differ");
}

void swiglu_matmul_impl(const Tensor& x, const Tensor& w_gate, const Tensor& w_up, Tensor& out, Tensor& scratch,
                        const RmsNormFirst* norm, const LoraTerms* lora = nullptr) {
  const cpu::MatmulArgs gate = detail::matmul_args(x, w_gate, out, "swiglu_matmul");
  const cpu::MatmulArgs up = detail::matmul_args(x, w_up, scratch, "swiglu_matmul");
  check_gate_up(w_gate, w_up, "swiglu_matmul");
  Tensor* const outputs[] = {&out, &scratch};
  auto terms = lora_terms_args("swiglu_matmul", x, lora, outputs);
  if (terms) {
    terms->swiglu_out = terms->y[0];
    terms->ld_swiglu = terms->ldy[0];
  }
  const std::shared_ptr<void> handed = norm != nullptr ? take_handed(x, *norm, "swiglu_matmul") : nullptr;
  out.note_written();
  scratch.note_written();
#if BRIOCHE_CUDA
  if (w_gate.device() == Device::CUDA) {
    if (norm == nullptr) return cuda::matmul_swiglu(gate, up, nullptr, or_null(terms));
    norm->normed.note_written();
    const cuda::InputNorm n = cuda_norm(x, *norm, "swiglu_matmul", handed);
    return cuda::matmul_swiglu(gate, up, &n, or_null(terms));
  }
#endif
  if (norm != nullptr) {
    rms_norm(x, norm->weight, norm->eps, norm->normed);
    return swiglu_matmul_impl(norm->normed, w_gate, w_up, out, scratch, nullptr, lora);
  }
  if (w_gate.device() == Device::CPU) {
    const cpu::MatmulArgs both[] = {gate, up};  // one activation quantization for the two
    cpu::matmul_group(both);
  } else {
    matmul(x, w_gate, out);
    matmul(x, w_up, scratch);
  }
  if (terms) return backend::cpu::lora_table_expand(*terms);  // SwiGLU of gate and up with their terms
  swiglu(out, scratch, out);
}

void matmul_group_impl(const Tensor& x, std::span<const Tensor* const> ws, std::span<Tensor* const> ys,
                       const RmsNormFirst* norm, const LoraTerms* lora = nullptr,
                       std::span<const cpu::ByteRange> read_ahead = {}) {
  BRIOCHE_CHECK(ws.size() == ys.size() && !ws.empty() && ws.size() <= 3, "matmul_group: ", ws.size(), " weights and ",
                ys.size(), " outputs (expected 1 to 3 of each)");
  std::vector<cpu::MatmulArgs> parts;
  for (size_t i = 0; i < ws.size(); ++i) parts.push_back(detail::matmul_args(x, *ws[i], *ys[i], "matmul_group"));
  const auto terms = lora_terms_args("matmul_group", x, lora, ys);
  const std::shared_ptr<void> handed = norm != nullptr ? take_handed(x, *norm, "matmul_group") : nullptr;
  for (Tensor* y : ys) y->note_written();
#if BRIOCHE_CUDA
  if (ws[0]->device() == Device::CUDA) {
    if (norm == nullptr) return cuda::matmul_group(parts, nullptr, or_null(terms));
    norm->normed.note_written();
    const cuda::InputNorm n = cuda_norm(x, *norm, "matmul_group", handed);
    return cuda::matmul_group(parts, &n, or_null(terms));
  }
#endif
  if (norm != nullptr) {
    rms_norm(x, norm->weight, norm->eps, norm->normed);
    return matmul_group_impl(norm->normed, ws, ys, nullptr, lora);
  }
  if (ws[0]->device() == Device::CPU) {
    cpu::matmul_group(parts, read_ahead);  // one activation quantization
  } else {
    for (size_t i = 0; i < ws.size(); ++i) matmul(x, *ws[i], *ys[i]);
  }
  if (terms) backend::cpu::lora_table_expand(*terms);
}

}  // namespace

void swiglu_matmul(const Tensor& x, const GateUpWeights& w, Tensor& out, Tensor& scratch) {
  swiglu_matmul_impl(x, w.gate, w.up, out, scratch, nullptr);
}

void swiglu_matmul(const Tensor& x, const RmsNormFirst& norm, const GateUpWeights& w, Tensor& out, Tensor& scratch,
                   const LoraTerms* lora) {
  swiglu_matmul_impl(x, w.gate, w.up, out, scratch, &norm, lora);
}

void swiglu_mlp(const Tensor& x, const RmsNormFirst& norm, const SwigluMlp& mlp, Tensor& y) {
  const auto& [w_gate, w_up, w_down, hidden, scratch, y_scratch, output] = mlp;
  const bool add = output == MlpOutput::AddToY;
#if BRIOCHE_CUDA
  if (w_gate.device() == Device::CUDA) {
    const cpu::MatmulArgs gate = detail::matmul_args(x, w_gate, hidden, "swiglu_mlp");
    const cpu::MatmulArgs up = detail::matmul_args(x, w_up, scratch, "swiglu_mlp");
    const cpu::MatmulArgs down = detail::matmul_args(hidden, w_down, y, "swiglu_mlp");
    check_gate_up(w_gate, w_up, "swiglu_mlp");
    const std::shared_ptr<void> handed = take_handed(x, norm, "swiglu_mlp");
    for (const Tensor* t : {&hidden, &scratch, &norm.normed, &y}) t->note_written();
    HandOnWrite write(add ? norm.handoff : nullptr, y, "swiglu_mlp");
    const cuda::InputNorm n = cuda_norm(x, norm, "swiglu_mlp", handed);
    cuda::matmul_swiglu_down(
        gate, up, down, {.norm = &n, .accumulate = add, .hand_on = {.norm_w = write.norm_w(), .handed = write.slot()}});
    return write.finish();
  }
#endif
  swiglu_matmul(x, norm, {.gate = w_gate, .up = w_up}, hidden, scratch);
  if (add)
    matmul_accumulate(hidden, w_down, y, y_scratch, {.hand_on = norm.handoff});
  else
    matmul(hidden, w_down, y);
}

void matmul_group(const Tensor& x, std::span<const Tensor* const> ws, std::span<Tensor* const> ys,
                  const LoraTerms* lora, std::span<const cpu::ByteRange> read_ahead) {
  matmul_group_impl(x, ws, ys, nullptr, lora, read_ahead);
}

void matmul_group(const Tensor& x, const RmsNormFirst& norm, std::span<const Tensor* const> ws,
                  std::span<Tensor* const> ys, const LoraTerms* lora) {
  matmul_group_impl(x, ws, ys, &norm, lora);
}

}  // namespace brioche::ops
