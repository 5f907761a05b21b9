// Helpers shared by the GGUF and safetensors checkpoint readers.
#include <map>
#include <sstream>

#include "core/error.h"
#include "model/weights.h"
#include "ops/quantize.h"

namespace brioche::model {

bool is_supported_architecture(const std::string& arch) {
  return arch == "llama" || arch == "mistral" || arch == "qwen2" || arch == "qwen3";
}

void fail_unsupported_architecture(const std::string& arch, const std::string& path) {
  fail("unsupported architecture '", arch, "' in ", path,
       " (supported: llama, mistral, qwen2, qwen3; and for run, chat, serve and bench only: gemma4, qwen3_5 and "
       "qwen3_5_moe from a safetensors directory)");
}

Tensor to_f32(const Tensor& t) {
  if (t.dtype() == DType::F32 && t.is_contiguous()) return t;
  return ops::convert(t, DType::F32);
}

void check_shape(const Tensor& t, std::initializer_list<int64_t> shape, const std::string& name,
                 const std::string& source) {
  bool ok = t.rank() == int(shape.size());
  int i = 0;
  for (int64_t d : shape) ok = ok && t.dim(i++) == d;
  if (ok) return;
  std::ostringstream want;
  want << "[";
  i = 0;
  for (int64_t d : shape) want << (i++ ? ", " : "") << d;
  want << "]";
  fail(source, ": tensor '", name, "' expected shape ", want.str(), ", found ", t.describe());
}

DType dominant_dtype(const ModelWeights& w) {
  std::map<DType, size_t> bytes;
  auto count = [&](const Tensor& t) {
    if (t.defined()) bytes[t.dtype()] += t.nbytes();
  };
  count(w.token_embd);
  for (const auto& l : w.layers) {
    for (const Tensor* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) count(*t);
  }
  DType best = DType::F32;
  size_t most = 0;
  for (auto [dtype, n] : bytes) {
    if (n > most) most = n, best = dtype;
  }
  return best;
}

}  // namespace brioche::model
