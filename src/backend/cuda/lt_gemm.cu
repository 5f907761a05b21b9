#include "backend/cuda/lt_gemm.h"

#include <map>
#include <memory>
#include <mutex>
#include <tuple>

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

// Algorithm choice per shape and operand alignment, found once by cuBLASLt's heuristic.
using AlgoKey = std::tuple<int, int, int, int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, uint32_t>;

// Largest power of two (≤ 256) dividing the address: the heuristic assumes
// 256-byte operands unless told, and views into a matrix (a vocabulary chunk,
// a tile of the reduction dimension) may start anywhere.
uint32_t alignment(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && address % a != 0) a /= 2;
  return a;
}

}  // namespace

void lt_gemm(const GemmDesc& g) {
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
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, uint64_t(g.m), uint64_t(g.n), g.ldc));

  static std::mutex mutex;
  static std::map<AlgoKey, cublasLtMatmulAlgo_t> algos;
  const uint32_t align_a = alignment(g.a), align_b = alignment(g.b), align_c = alignment(g.c);
  AlgoKey key{int(g.ab_type), int(g.compute), int(g.op_a), int(g.op_b), g.m, g.n, g.k, g.lda, g.ldb, g.ldc,
              align_a | align_b << 9 | align_c << 18};
  cublasLtMatmulAlgo_t algo;
  {
    std::lock_guard lock(mutex);
    auto it = algos.find(key);
    if (it != algos.end()) {
      algo = it->second;
    } else {
      cublasLtMatmulPreference_t pref;
      CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
      size_t ws = kWorkspaceBytes;
      CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                        &ws, sizeof ws));
      CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a,
                                                        sizeof align_a));
      CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b,
                                                        sizeof align_b));
      CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c,
                                                        sizeof align_c));
      CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c,
                                                        sizeof align_c));
      cublasLtMatmulHeuristicResult_t result{};
      int found = 0;
      CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(ctx.handle, op, la, lb, lc, lc, pref, 1, &result, &found));
      cublasLtMatmulPreferenceDestroy(pref);
      BRIOCHE_CHECK(found > 0, "cuBLASLt: no algorithm for a ", g.m, "x", g.n, "x", g.k, " GEMM");
      algo = result.algo;
      algos.emplace(key, algo);
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
