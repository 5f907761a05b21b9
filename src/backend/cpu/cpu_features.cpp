#include "backend/cpu/cpu_features.h"

#include <atomic>

#include "core/error.h"

namespace brioche::cpu {

namespace {

bool cpu_has(Isa isa) {
#if defined(__x86_64__)
  switch (isa) {
    case Isa::Scalar: return true;
    case Isa::Avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    case Isa::Avx512:
      return cpu_has(Isa::Avx2) && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
    case Isa::Avx512Vnni: return cpu_has(Isa::Avx512) && __builtin_cpu_supports("avx512vnni");
  }
  return false;
#else
  return isa == Isa::Scalar;
#endif
}

Isa best_isa() {
  Isa best = Isa::Scalar;
  for (Isa isa : available_isas()) best = isa;
  return best;
}

// -1: no override; otherwise an Isa value.
std::atomic<int> g_override{-1};

}  // namespace

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
    case Isa::Avx512Vnni: return "avx512_vnni";
  }
  return "?";
}

std::vector<Isa> available_isas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Avx512Vnni})
    if (cpu_has(isa)) out.push_back(isa);
  return out;
}

Isa active_isa() {
  static const Isa best = best_isa();
  int forced = g_override.load(std::memory_order_relaxed);
  return forced < 0 ? best : Isa(forced);
}

void set_isa_override(Isa isa) {
  BRIOCHE_CHECK(cpu_has(isa), "set_isa_override: this CPU cannot run the ", isa_name(isa),
                " kernels (check lscpu flags)");
  g_override.store(int(isa), std::memory_order_relaxed);
}

void clear_isa_override() { g_override.store(-1, std::memory_order_relaxed); }

}  // namespace brioche::cpu
