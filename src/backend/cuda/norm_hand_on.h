// The writer's half of ops::NormHandoff at the CUDA launchers: a request
// that the GEMV adding to y also write RMSNorm(y) with norm_w for the next
// op (norm_handoff.h has the math). Plain C++ header (gemv.cuh carries it in
// GemvArgs; the kernels never read it).
#pragma once

#include <memory>

namespace brioche::cuda {

struct NormHandOn {
  const float* norm_w = nullptr;            // [m]; no request when null
  std::shared_ptr<void>* handed = nullptr;  // receives what the launch wrote (a detail::HandedNorm), else untouched
};

}  // namespace brioche::cuda
