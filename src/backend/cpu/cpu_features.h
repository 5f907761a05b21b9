// Which SIMD instruction set the CPU kernels use, chosen at run time.
//
// The build baseline is x86-64-v3 (AVX2+FMA+F16C). Wider kernels are compiled
// per file with `#pragma GCC target` and picked here from CPUID. Tests force
// each available path through set_isa_override() and compare the results.
#pragma once

#include <string_view>
#include <vector>

namespace brioche::cpu {

enum class Isa {
  Scalar,      // portable C++: dequantize to f32, f32 dot (also a test reference)
  Avx2,        // 256-bit, int8 dots with vpmaddubsw
  Avx512,      // 512-bit (F, BW, DQ, VL), int8 dots with vpmaddubsw
  Avx512Vnni,  // 512-bit with vpdpbusd
};

std::string_view isa_name(Isa isa);

// Every path this CPU can run, narrowest first.
std::vector<Isa> available_isas();

// The best available path, or the override when one is set.
Isa active_isa();

// Force a path (tests, benchmarks); throws if the CPU cannot run it.
void set_isa_override(Isa isa);
void clear_isa_override();

// AMX bf16 tiles (TDPBF16PS) with AVX512-BF16 conversions, on a CPU that has
// them and a kernel that grants this process the tile data state
// (arch_prctl ARCH_REQ_XCOMP_PERM, asked once here).
bool amx_bf16_available();

// Whether the CPU training products through a quantized base run on AMX
// now (backend/cpu/linear_backward.h): available, the active path is
// AVX-512 or wider, BRIOCHE_CPU_AMX is not "0", and no override says off.
bool amx_bf16_active();

// Force AMX off (or on, where available) for tests and A/B runs.
void set_amx_override(bool on);
void clear_amx_override();

}  // namespace brioche::cpu
