#include "backend/cuda/lt_gemm.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <compare>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "core/env_switch.h"

namespace brioche::cuda::detail {

namespace {

constexpr size_t kWorkspaceBytes = size_t(32) << 20;

struct LtContext {
  cublasLtHandle_t handle = nullptr;
  std::shared_ptr<void> workspace;
};

LtContext& lt() {
  static LtContext* ctx = [] {
    auto* c = new LtContext();  // leaked: lives as long as the process
    CUBLAS_CHECK(cublasLtCreate(&c->handle));
    c->workspace = allocate(kWorkspaceBytes);
    return c;
  }();
  return *ctx;
}

// Algorithm choice per shape, output type and operand alignment, made once:
// cuBLASLt's heuristic, timed among its first choices for small batches
// (below).
struct AlgoKey {
  int ab_type, c_type, compute, op_a, op_b;
  int64_t m, n, k, lda, ldb, ldc;
  uint32_t alignments;  // of a, b and c, 9 bits each
  auto operator<=>(const AlgoKey&) const = default;
};

const char* type_name(cudaDataType_t t) {
  switch (t) {
    case CUDA_R_32F: return "f32";
    case CUDA_R_16F: return "f16";
    case CUDA_R_16BF: return "bf16";
    default: return "another type";
  }
}

// The outputs lt_gemm writes: f32 from any inputs, or 16-bit of the inputs'
// own type, with beta 0 (a 16-bit C rounded at every accumulation would not
// be the sum the caller asked for; nothing accumulates into one).
void check_output(const GemmDesc& g) {
  if (g.c_type == CUDA_R_32F) return;
  BRIOCHE_CHECK((g.c_type == CUDA_R_16BF || g.c_type == CUDA_R_16F) && g.c_type == g.ab_type,
                "lt_gemm: expected an f32 output or one of the inputs' 16-bit type, got ", type_name(g.c_type),
                " output for ", type_name(g.ab_type), " inputs (", g.m, "x", g.n, "x", g.k, " GEMM)");
  BRIOCHE_CHECK(g.beta == 0.0f, "lt_gemm: a ", type_name(g.c_type),
                " output is written, not accumulated into: expected beta 0, got ", g.beta, " (", g.m, "x", g.n, "x",
                g.k, " GEMM)");
}

// Largest power of two (≤ 256) dividing the address: the heuristic assumes
// 256-byte operands unless told, and views into a matrix (a vocabulary chunk,
// a tile of the reduction dimension) may start anywhere.
uint32_t alignment(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && address % a != 0) a /= 2;
  return a;
}

// Every GEMM is timed once per shape among cuBLASLt's first
// kTuneCandidates heuristic choices, and the fastest is kept. At few
// activation rows the GEMMs stream weights, and the heuristic's first choice
// left bandwidth unused; more candidates than 8 gained little there.
// Compute-bound GEMMs gain too (docs/perf-log/cuda-decode.md#batched-past-9000
// has the numbers), and there
// the best choice hardly depends on the exact row count: above
// kExactTuneRows one timing serves every row count up to the next power of
// two (a server's prompts come in many lengths; each bucket pays ~8 × 4 runs
// of each shape once). Outputs over kMaxTuneScratchBytes (a vocabulary-wide
// f32 head) are not timed: the timing writes a scratch C of that size.
// BRIOCHE_CUDA_GEMM_TUNE=0 keeps the first choice; BRIOCHE_CUDA_GEMM_TUNE_MAX_ROWS
// (GEMMs of more rows take the first choice) and BRIOCHE_CUDA_GEMM_TUNE_CANDIDATES
// (at most kMaxTuneCandidates) are for A/B runs.
constexpr int64_t kExactTuneRows = 512;
constexpr size_t kMaxTuneScratchBytes = size_t(512) << 20;
constexpr int kTuneCandidates = 8;
constexpr int kMaxTuneCandidates = 32;

int tune_candidates() {
  static const int n =
      int(std::clamp<long>(env_int("BRIOCHE_CUDA_GEMM_TUNE_CANDIDATES", kTuneCandidates), 1, kMaxTuneCandidates));
  return n;
}

size_t output_size(const GemmDesc& g) { return size_t(g.ldc) * size_t(g.n) * output_bytes(g.c_type); }

bool tunable(const GemmDesc& g) {
  static const bool on = env_switch_on("BRIOCHE_CUDA_GEMM_TUNE");
  static const int64_t max_rows = env_int("BRIOCHE_CUDA_GEMM_TUNE_MAX_ROWS", INT64_MAX);
  return on && g.n <= max_rows && output_size(g) <= kMaxTuneScratchBytes;
}

// The row count a timing is filed under: the exact one up to kExactTuneRows,
// else the next power of two.
int64_t tune_rows(int64_t n) { return n <= kExactTuneRows ? n : int64_t(std::bit_ceil(uint64_t(n))); }

bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

// The fastest of `results` on this GEMM, writing a scratch C with beta 0
// (the caller's C may be accumulated into). The first candidate runs three
// times untimed, so the clocks have left idle, then the candidates take turns,
// one timed run each per round, four rounds, and each keeps its best run.
// Timed one after the other, a process could keep a different GEMM from the
// next (8B Q4_0 prefill 42.0–44.1k tokens/s across processes, 44.0k each in
// turns; docs/perf-log/cuda-decode.md#affine-int8-gemm-turns). Candidates that fail to launch are skipped.
cublasLtMatmulAlgo_t fastest(LtContext& ctx, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t la,
                             cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t lc, const GemmDesc& g,
                             const cublasLtMatmulHeuristicResult_t* results, int found, cudaStream_t stream) {
  constexpr int kWarmups = 3, kRounds = 4;
  std::shared_ptr<void> c = allocate(output_size(g));
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  const float zero = 0.0f;
  auto run = [&](int i) {
    return cublasLtMatmul(ctx.handle, op, &g.alpha, g.a, la, g.b, lb, &zero, c.get(), lc, c.get(), lc, &results[i].algo,
                          ctx.workspace.get(), kWorkspaceBytes, stream);
  };
  std::vector<float> best_ms(size_t(found), INFINITY);
  std::vector<bool> failed(size_t(found), false);
  for (int w = 0; w < kWarmups; ++w) failed[0] = failed[0] || run(0) != CUBLAS_STATUS_SUCCESS;
  for (int round = 0; round < kRounds; ++round) {
    for (int i = 0; i < found; ++i) {
      if (failed[size_t(i)]) continue;
      CUDA_CHECK(cudaEventRecord(start, stream));
      failed[size_t(i)] = run(i) != CUBLAS_STATUS_SUCCESS;
      CUDA_CHECK(cudaEventRecord(stop, stream));
      CUDA_CHECK(cudaEventSynchronize(stop));
      float t = 0.0f;
      CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
      if (!failed[size_t(i)]) best_ms[size_t(i)] = std::min(best_ms[size_t(i)], t);
    }
  }
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  int best = 0;
  for (int i = 1; i < found; ++i)
    if (best_ms[size_t(i)] < best_ms[size_t(best)]) best = i;
  return results[best].algo;
}

// Whether cuBLASLt runs `algo` (timed at another row count of the same
// bucket) on this GEMM within the workspace.
bool accepts(LtContext& ctx, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb,
             cublasLtMatrixLayout_t lc, const cublasLtMatmulAlgo_t& algo) {
  cublasLtMatmulHeuristicResult_t result = {};
  return cublasLtMatmulAlgoCheck(ctx.handle, op, la, lb, lc, lc, &algo, &result) == CUBLAS_STATUS_SUCCESS &&
         result.workspaceSize <= kWorkspaceBytes;
}

}  // namespace

void lt_gemm(const GemmDesc& g) {
  check_output(g);
  LtContext& ctx = lt();
  cublasLtMatmulDesc_t op;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, g.compute, CUDA_R_32F));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &g.op_a, sizeof g.op_a));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &g.op_b, sizeof g.op_b));
  // Stored shapes: op(A) is m×k, so A is k×m when transposed; likewise B.
  const bool ta = g.op_a == CUBLAS_OP_T, tb = g.op_b == CUBLAS_OP_T;
  cublasLtMatrixLayout_t la, lb, lc;
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, g.ab_type, uint64_t(ta ? g.k : g.m), uint64_t(ta ? g.m : g.k), g.lda));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, g.ab_type, uint64_t(tb ? g.n : g.k), uint64_t(tb ? g.k : g.n), g.ldb));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lc, g.c_type, uint64_t(g.m), uint64_t(g.n), g.ldc));

  static std::mutex mutex;
  // The algorithm kept per exact shape, and the timed ones per timing bucket
  // (the key's row count replaced by tune_rows).
  static std::map<AlgoKey, cublasLtMatmulAlgo_t> algos, timed;
  const uint32_t align_a = alignment(g.a), align_b = alignment(g.b), align_c = alignment(g.c);
  const AlgoKey key{int(g.ab_type),
                    int(g.c_type),
                    int(g.compute),
                    int(g.op_a),
                    int(g.op_b),
                    g.m,
                    g.n,
                    g.k,
                    g.lda,
                    g.ldb,
                    g.ldc,
                    align_a | align_b << 9 | align_c << 18};
  AlgoKey bucket = key;
  bucket.n = tune_rows(g.n);
  cublasLtMatmulAlgo_t algo;
  {
    std::lock_guard lock(mutex);
    auto it = algos.find(key);
    if (it != algos.end()) {
      algo = it->second;
    } else if (auto b = timed.find(bucket); b != timed.end() && accepts(ctx, op, la, lb, lc, b->second)) {
      algo = b->second;
      algos.emplace(key, algo);
    } else {
      cublasLtMatmulPreference_t pref;
      CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
      size_t ws = kWorkspaceBytes;
      CUBLAS_CHECK(
          cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
      CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a,
                                                        sizeof align_a));
      CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b,
                                                        sizeof align_b));
      CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c,
                                                        sizeof align_c));
      CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c,
                                                        sizeof align_c));
      cublasLtMatmulHeuristicResult_t results[kMaxTuneCandidates] = {};
      // Timing needs a running stream: inside a capture the first choice
      // serves this call only, and the shape is timed at its first call
      // outside one (decode graphs run each step eagerly before capturing).
      const bool tune_later = tunable(g) && capturing(current_stream());
      const bool tune = tunable(g) && !tune_later;
      int found = 0;
      CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(ctx.handle, op, la, lb, lc, lc, pref, tune ? tune_candidates() : 1,
                                                  results, &found));
      cublasLtMatmulPreferenceDestroy(pref);
      BRIOCHE_CHECK(found > 0, "cuBLASLt: no algorithm for a ", g.m, "x", g.n, "x", g.k, " GEMM");
      algo = found > 1 ? fastest(ctx, op, la, lb, lc, g, results, found, current_stream()) : results[0].algo;
      if (!tune_later) algos.emplace(key, algo);
      if (tune) timed.insert_or_assign(bucket, algo);
    }
  }
  CUBLAS_CHECK(cublasLtMatmul(ctx.handle, op, &g.alpha, g.a, la, g.b, lb, &g.beta, g.c, lc, g.c, lc, &algo,
                              ctx.workspace.get(), kWorkspaceBytes, current_stream()));
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(op);
}

}  // namespace brioche::cuda::detail
