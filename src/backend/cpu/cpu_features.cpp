#include "backend/cpu/cpu_features.h"

#include <atomic>

#include "core/env_switch.h"
#include "core/error.h"

#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

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

// -1: no override; 0 off; 1 on.
std::atomic<int> g_amx_override{-1};

bool detect_amx_bf16() {
#if defined(__linux__) && defined(__x86_64__)
  if (!cpu_has(Isa::Avx512)) return false;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  // CPUID leaf 7: EDX bit 22 AMX-BF16, bit 24 AMX-TILE; subleaf 1: EAX bit 5 AVX512-BF16.
  __asm__("cpuid" : "=a"(eax), "=b"(ebx), "=c"(ecx), "=d"(edx) : "a"(7), "c"(0));
  if (!((edx >> 22) & 1) || !((edx >> 24) & 1)) return false;
  __asm__("cpuid" : "=a"(eax), "=b"(ebx), "=c"(ecx), "=d"(edx) : "a"(7), "c"(1));
  if (!((eax >> 5) & 1)) return false;
  // Linux hands out the 8 KB tile state only on request (per process).
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

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

bool amx_bf16_available() {
  static const bool available = detect_amx_bf16();
  return available;
}

bool amx_bf16_active() {
  static const bool enabled = env_switch_on("BRIOCHE_CPU_AMX");
  if (!amx_bf16_available() || active_isa() < Isa::Avx512) return false;
  const int forced = g_amx_override.load(std::memory_order_relaxed);
  return forced < 0 ? enabled : forced == 1;
}

void set_amx_override(bool on) {
  BRIOCHE_CHECK(!on || amx_bf16_available(), "set_amx_override: this CPU (or kernel) cannot run AMX bf16 tiles");
  g_amx_override.store(on ? 1 : 0, std::memory_order_relaxed);
}

void clear_amx_override() { g_amx_override.store(-1, std::memory_order_relaxed); }

}  // namespace brioche::cpu
