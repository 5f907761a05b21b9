// The registry of environment variables (core/env_switch.h). One line each:
// a new switch is added here first.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/env_switch.h"
#include "core/error.h"

namespace brioche {
namespace {

using enum EnvKind;

// Sorted by name (env_registry_test checks it).
constexpr EnvVariable kRegistry[] = {
    {"BRIOCHE_API_KEY", Text, "", "the server API key `brioche train --report-to` sends (--report-key overrides it)"},
    {"BRIOCHE_CPU_AMX", OnUnlessZero, "1",
     "CPU training products through a quantized base on AMX bf16 tiles (f32 sums) where the CPU has them; 0: int8 "
     "forward, f32 AVX-512 backward"},
    {"BRIOCHE_CPU_AMX_TILES_MB", Integer, "2048",
     "MiB of bf16 AMX tiles CPU training keeps of a quantized base (made once, 2 bytes a weight element per product); "
     "past it a weight is decoded per call; 0: every call"},
    {"BRIOCHE_CPU_DELTA_RULE_CHUNKED_BACKWARD", OnUnlessZero, "1",
     "Qwen 3.5 training: the gated delta rule's backward in chunks of 16 rows (small GEMMs against the state); 0: "
     "the recurrent walk, row by row"},
    {"BRIOCHE_CUDA_ATTENTION_CLUSTER", OnUnlessZero, "1",
     "decode attention combines its splits inside a thread-block cluster; 0: the separate combine kernel"},
    {"BRIOCHE_CUDA_ATTENTION_INT8", OnUnlessZero, "1",
     "decode attention writes its output as int8 for the output projection's int8 GEMV (quantized models); 0: the "
     "projection quantizes it"},
    {"BRIOCHE_CUDA_ATTENTION_RELEASE", OnUnlessZero, "1",
     "decode attention lets the next kernel launch as it finishes (PDL release); 0: the plain prologue"},
    {"BRIOCHE_CUDA_ATTENTION_ROW_SPLITS", OnUnlessZero, "1",
     "decode attention launches of up to 7 rows split each row's keys by its own length (rows get the bits they get "
     "alone: exact speculative verification); 0: by the launch's longest row and row count"},
    {"BRIOCHE_CUDA_DECODE_MMA", OnUnlessZero, "1",
     "batched decode attention on tensor cores (mma) for enough rows per KV head; 0: the scalar kernel"},
    {"BRIOCHE_CUDA_FUSE_NORM", OnUnlessZero, "1",
     "RMSNorm fused into the next matmul; 0: the norm as a kernel of its own"},
    {"BRIOCHE_CUDA_FUSE_ROPE", OnUnlessZero, "1", "RoPE fused into the KV-cache write; 0: two launches"},
    {"BRIOCHE_CUDA_GATE_UP_16BIT", OnUnlessZero, "1",
     "gate/up GEMMs write 16-bit outputs for the SwiGLU; 0: f32 outputs"},
    {"BRIOCHE_CUDA_GEMM_TUNE", OnUnlessZero, "1",
     "cuBLASLt GEMMs time their candidate algorithms once per shape; 0: the first choice"},
    {"BRIOCHE_CUDA_GEMM_TUNE_CANDIDATES", Integer, "8", "how many cuBLASLt candidates the tuning times"},
    {"BRIOCHE_CUDA_GEMM_TUNE_MAX_ROWS", Integer, "",
     "GEMMs with more rows than this skip the tuning (unset: no limit)"},
    {"BRIOCHE_CUDA_GEMV_EARLY_TILES", OnUnlessZero, "1",
     "streamed GEMVs request a few weight tiles before the PDL wait; 0: the whole ring"},
    {"BRIOCHE_CUDA_GEMV_INT8", OnUnlessZero, "1",
     "quantized decode GEMVs run on int8 dot products; 0: dequantize to f32"},
    {"BRIOCHE_CUDA_GEMV_STREAM", OnUnlessZero, "1",
     "dense (bf16/f16/f32) decode GEMVs stream weight tiles through a shared-memory ring; 0: plain loads"},
    {"BRIOCHE_CUDA_GEMV_STREAM_INT8", OnUnlessZero, "1",
     "quantized decode GEMVs stream weight tiles (gemv_stream_rows.cu); 0: the warp kernels of gemv_int8.cuh"},
    {"BRIOCHE_CUDA_GEMV_STREAM_ROWS", Integer, "8",
     "most x rows (1..8) a streamed bf16/f16 GEMV takes; 1: 2..8 rows run the warp-per-row kernel"},
    {"BRIOCHE_CUDA_GRAPHS", OnUnlessZero, "1",
     "decode steps replay CUDA graphs (Llama family and Gemma 4); 0: eager launches"},
    {"BRIOCHE_CUDA_GRAPHS_VERIFY", OnUnlessZero, "1",
     "speculative verify steps replay CUDA graphs too; 0: they run eagerly"},
    {"BRIOCHE_CUDA_L2_EVICT_FIRST", OnUnlessZero, "1",
     "streamed weights are read with an L2 evict-first policy; 0: the default policy"},
    {"BRIOCHE_CUDA_NORM_FUSION_MB", Integer, "8",
     "largest GEMV (MiB of activations x weights) that takes the fused norm"},
    {"BRIOCHE_CUDA_NORM_HANDOFF", OnUnlessZero, "1",
     "a GEMV hands its output's norm sums to the next GEMV; 0: norm kernels"},
    {"BRIOCHE_CUDA_PDL", OnUnlessZero, "1",
     "programmatic dependent launch (kernels overlap their prologues); 0: plain launches"},
    {"BRIOCHE_CUDA_PREFETCH", OnUnlessZero, "1",
     "GEMVs of up to 16 MB of weights ask L2 for them while the kernel before runs; 0: no prefetch"},
    {"BRIOCHE_CUDA_PREFILL_ATTENTION", OnUnlessZero, "1",
     "prefill attention (16+ query rows, f16 cache, head_dim 64/128) in the flash-style prefill kernel; 0: the general "
     "paged kernel"},
    {"BRIOCHE_CUDA_PREFILL_WGMMA", OnUnlessZero, "1",
     "head_dim-128 prefill attention on Hopper wgmma; 0: the mma kernel"},
    {"BRIOCHE_CUDA_SAMPLING", OnUnlessZero, "1", "sampling on the GPU; 0: logits copied back and sampled on the CPU"},
    {"BRIOCHE_CUDA_STACKED_GEMM", OnUnlessZero, "1",
     "Q/K/V (and gate/up) GEMMs of one input run as one stacked GEMM; 0: separate GEMMs"},
    {"BRIOCHE_CUDA_TRACE", Text, "", "in a cuda-trace build, the file a kernel timeline is written to"},
    {"BRIOCHE_CUDA_TRAIN_ATTENTION_CTAS", Integer, "3", "training attention kernel's CTAs per SM (2 or 3)"},
    {"BRIOCHE_GRAMMAR", OnUnlessZero, "1",
     "structured output compiles grammars; 0: every constrained request degrades to a prompt instruction"},
    {"BRIOCHE_GRAMMAR_JUMP", OffUnlessOne, "0",
     "jump-forward decoding of grammar-forced spans for every request (else per request: \"jump_forward\": true)"},
    {"BRIOCHE_MODEL", Text, "",
     "the default model for every command (else ~/.cache/brioche/models/SmolLM2-135M-Instruct.Q4_1.gguf)"},
    {"BRIOCHE_POISON", OffUnlessOne, "0",
     "fill fresh activations (CPU and CUDA) with NaN so a read before a write shows (every test binary sets it)"},
    {"BRIOCHE_RUN_AHEAD", OnUnlessZero, "1",
     "on CUDA, the next decode step is launched before the sampled token returns; 0: step by step"},
};

}  // namespace

std::span<const EnvVariable> env_registry() { return kRegistry; }

const EnvVariable& registered_env(std::string_view name) {
  auto it =
      std::find_if(std::begin(kRegistry), std::end(kRegistry), [&](const EnvVariable& v) { return v.name == name; });
  if (it == std::end(kRegistry))
    fail("environment variable ", name, " is read but not declared in core/env_registry.cpp");
  return *it;
}

namespace {
// The value of a registered variable, or null when unset.
const char* lookup(const char* name, EnvKind kind) {
  const EnvVariable& v = registered_env(name);
  BRIOCHE_CHECK(v.kind == kind, "environment variable ", name, " is declared as another kind in core/env_registry.cpp");
  return std::getenv(name);
}
}  // namespace

bool env_switch_on(const char* name) {
  const char* v = lookup(name, OnUnlessZero);
  return v == nullptr || std::strcmp(v, "0") != 0;
}

bool env_flag_set(const char* name) {
  const char* v = lookup(name, OffUnlessOne);
  return v != nullptr && std::strcmp(v, "1") == 0;
}

long env_int(const char* name, long fallback) {
  const char* v = lookup(name, Integer);
  return v != nullptr ? std::strtol(v, nullptr, 10) : fallback;
}

double env_number(const char* name, double fallback) {
  const char* v = lookup(name, Integer);
  return v != nullptr ? std::strtod(v, nullptr) : fallback;
}

std::string env_text(const char* name) {
  const char* v = lookup(name, Text);
  return v != nullptr ? v : "";
}

}  // namespace brioche
