// CUDA kernels of ops::gated_delta_rule and ops::delta_rule_gates (the math
// in ops/gated_delta_rule.h). One CTA per (sequence, value head) holds the
// head's dk × dv state in shared memory for the whole forward and walks the
// sequence's rows in the pieces the CPU kernel uses (chunks aligned to
// multiples of kDeltaRuleChunk, cut at splits and checkpoints), each piece
// in the chunked form of backend/cpu/gated_delta_rule.cpp (a piece of one
// row, a decode step, is the same arithmetic as the recurrent form):
//   A_ij = β_i (k̂_i·k̂_j) e^{γ_i−γ_j} (j < i),  T = (I + A)⁻¹
//   U = T diag(β) V,  W = −T diag(β e^γ) K̂,  V' = U + W S
//   out_i = e^{γ_i} q̂_iᵀS + Σ_{j≤i} (q̂_i·k̂_j) e^{γ_i−γ_j} V'_j
//   S ← e^{γ_m} S + Σ_j e^{γ_m−γ_j} k̂_j V'_jᵀ
// The state is read from its slot once and written back once per forward;
// a checkpoint copies it from shared memory to its slot after its piece.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/runtime.h"
#include "core/error.h"

namespace brioche::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kChunk = ops::kDeltaRuleChunk;
static_assert(kChunk <= 32, "the forward substitution runs in one warp");

struct DeltaRuleKernelArgs {
  const float *q, *k, *v, *g, *beta;  // rows with the strides below (floats)
  float* state;                       // [n_slots, n_v_heads, key_dim, value_dim]
  float* out;                         // [n_rows, n_v_heads * value_dim]
  int64_t q_stride, k_stride, v_stride, g_stride, beta_stride, out_stride;
  int heads_per_k_head, key_dim, value_dim;
  float q_scale;
  // The plan (DeltaRulePlan below), on the device.
  const int32_t* sequences;  // [n_sequences][4]: state slot, starts, first piece, end piece
  const int32_t* pieces;     // [n_pieces][4]: first row, rows, first checkpoint, end checkpoint
  const int32_t* cp_slots;   // [n_checkpoints]: slots taken after their piece
};

// Shared memory of a CTA, in floats: S [dk, dv]; q̂, k̂, W [C, dk + 1] (padded
// rows: the pair products read columns of different rows); U (then V') and
// the state part of out [C, dv]; A, T, P [C, C]; γ, β, e^{γ_m−γ_j} [C].
struct SharedLayout {
  int ldk, s, q, k, w, u, o, a, t, p, gamma, beta, decay, floats;
  __host__ __device__ SharedLayout(int dk, int dv) : ldk(dk + 1) {
    int at = 0;
    auto take = [&at](int n) {
      const int here = at;
      at += n;
      return here;
    };
    s = take(dk * dv);
    q = take(kChunk * ldk);
    k = take(kChunk * ldk);
    w = take(kChunk * ldk);
    u = take(kChunk * dv);
    o = take(kChunk * dv);
    a = take(kChunk * kChunk);
    t = take(kChunk * kChunk);
    p = take(kChunk * kChunk);
    gamma = take(kChunk);
    beta = take(kChunk);
    decay = take(kChunk);
    floats = at;
  }
};

// Rows [row0, row0 + m) of the sequence through the chunked form (m ≤ C),
// the state S in shared memory.
__device__ void delta_rule_piece(const DeltaRuleKernelArgs& a, const SharedLayout& l, float* sm, int h, int64_t row0,
                                 int m) {
  const int dk = a.key_dim, dv = a.value_dim, ldk = l.ldk, kh = h / a.heads_per_k_head;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, n_warps = blockDim.x / 32;
  float *S = sm + l.s, *q = sm + l.q, *k = sm + l.k, *w = sm + l.w, *u = sm + l.u, *o = sm + l.o;
  float *A = sm + l.a, *T = sm + l.t, *P = sm + l.p, *gamma = sm + l.gamma, *beta = sm + l.beta, *decay = sm + l.decay;

  // q̂ = q / √(Σq² + 1e-6) / √dk, k̂ = k / √(Σk² + 1e-6): a warp per row.
  for (int idx = warp; idx < 2 * m; idx += n_warps) {
    const bool is_q = idx < m;
    const int i = is_q ? idx : idx - m;
    const float* src =
        is_q ? a.q + (row0 + i) * a.q_stride + int64_t(kh) * dk : a.k + (row0 + i) * a.k_stride + int64_t(kh) * dk;
    float ss = 0.0f;
    for (int e = lane; e < dk; e += 32) ss = fmaf(src[e], src[e], ss);
    for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
    const float inv = (is_q ? a.q_scale : 1.0f) / sqrtf(ss + 1e-6f);
    float* dst = (is_q ? q : k) + i * ldk;
    for (int e = lane; e < dk; e += 32) dst[e] = src[e] * inv;
  }
  if (tid == 0) {
    float g_sum = 0.0f;
    for (int i = 0; i < m; ++i) {
      g_sum += a.g[(row0 + i) * a.g_stride + h];
      gamma[i] = g_sum;
      beta[i] = a.beta[(row0 + i) * a.beta_stride + h];
    }
  }
  __syncthreads();

  // A_ij (j < i) and P_ij (j ≤ i); zero elsewhere.
  for (int pair = tid; pair < m * m; pair += blockDim.x) {
    const int i = pair / m, j = pair % m;
    float aij = 0.0f, pij = 0.0f;
    if (j <= i) {
      const float *ki = k + i * ldk, *kj = k + j * ldk, *qi = q + i * ldk;
      float kk = 0.0f, qk = 0.0f;
      for (int e = 0; e < dk; ++e) {
        kk = fmaf(ki[e], kj[e], kk);
        qk = fmaf(qi[e], kj[e], qk);
      }
      const float d = expf(gamma[i] - gamma[j]);
      if (j < i) aij = beta[i] * kk * d;
      pij = j < i ? qk * d : qk;
    }
    A[i * kChunk + j] = aij;
    P[i * kChunk + j] = pij;
  }
  __syncthreads();

  // T = (I + A)⁻¹ by forward substitution, T_i = e_i − Σ_{j<i} A_ij T_j (one
  // warp, a lane per column); and e^{γ_m−γ_j} for the state update.
  if (warp == 0) {
    for (int i = 0; i < m; ++i) {
      if (lane < m) {
        float ti = lane == i ? 1.0f : 0.0f;
        for (int j = 0; j < i; ++j) ti -= A[i * kChunk + j] * T[j * kChunk + lane];
        T[i * kChunk + lane] = ti;
      }
      __syncwarp();
    }
    if (lane < m) decay[lane] = expf(gamma[m - 1] - gamma[lane]);
  }
  __syncthreads();

  // U = T·(β v),  W = T·(−β e^γ k̂).
  for (int e = tid; e < m * dv; e += blockDim.x) {
    const int i = e / dv, c = e % dv;
    float acc = 0.0f;
    for (int j = 0; j <= i; ++j)
      acc = fmaf(T[i * kChunk + j], beta[j] * a.v[(row0 + j) * a.v_stride + int64_t(h) * dv + c], acc);
    u[i * dv + c] = acc;
  }
  for (int e = tid; e < m * dk; e += blockDim.x) {
    const int i = e / dk, r = e % dk;
    float acc = 0.0f;
    for (int j = 0; j <= i; ++j) acc = fmaf(T[i * kChunk + j], -beta[j] * expf(gamma[j]) * k[j * ldk + r], acc);
    w[i * ldk + r] = acc;
  }
  __syncthreads();

  // V' = U + W S and the state part of out, e^{γ_i} q̂_iᵀ S: one pass over S.
  for (int e = tid; e < m * dv; e += blockDim.x) {
    const int i = e / dv, c = e % dv;
    const float *wi = w + i * ldk, *qi = q + i * ldk;
    float acc_u = 0.0f, acc_o = 0.0f;
    for (int r = 0; r < dk; ++r) {
      const float s = S[r * dv + c];
      acc_u = fmaf(wi[r], s, acc_u);
      acc_o = fmaf(qi[r], s, acc_o);
    }
    u[i * dv + c] += acc_u;
    o[i * dv + c] = expf(gamma[i]) * acc_o;
  }
  __syncthreads();

  // out_i = o_i + Σ_{j≤i} P_ij V'_j;  S ← e^{γ_m} S + Σ_j e^{γ_m−γ_j} k̂_j V'_jᵀ.
  for (int e = tid; e < m * dv; e += blockDim.x) {
    const int i = e / dv, c = e % dv;
    float acc = o[i * dv + c];
    for (int j = 0; j <= i; ++j) acc = fmaf(P[i * kChunk + j], u[j * dv + c], acc);
    a.out[(row0 + i) * a.out_stride + int64_t(h) * dv + c] = acc;
  }
  const float end_decay = expf(gamma[m - 1]);
  for (int e = tid; e < dk * dv; e += blockDim.x) {
    const int r = e / dv, c = e % dv;
    float acc = S[e] * end_decay;
    for (int j = 0; j < m; ++j) acc = fmaf(decay[j] * k[j * ldk + r], u[j * dv + c], acc);
    S[e] = acc;
  }
  __syncthreads();
}

// Grid (value heads, sequences).
__global__ void __launch_bounds__(kThreads) gated_delta_rule_kernel(DeltaRuleKernelArgs a) {
  extern __shared__ float sm[];
  const SharedLayout l(a.key_dim, a.value_dim);
  const int h = blockIdx.x, heads = gridDim.x, tid = threadIdx.x;
  const int32_t* seq = a.sequences + 4 * blockIdx.y;
  const int64_t head_floats = int64_t(a.key_dim) * a.value_dim;
  auto slot_state = [&](int32_t slot) { return a.state + (int64_t(slot) * heads + h) * head_floats; };
  float* own = slot_state(seq[0]);
  float* S = sm + l.s;
  const bool starts = seq[1] != 0;
  for (int64_t e = tid; e < head_floats; e += blockDim.x) S[e] = starts ? 0.0f : own[e];
  __syncthreads();
  for (int32_t piece = seq[2]; piece < seq[3]; ++piece) {
    const int32_t* p = a.pieces + 4 * piece;
    if (p[1] > 0) delta_rule_piece(a, l, sm, h, p[0], p[1]);
    for (int32_t cp = p[2]; cp < p[3]; ++cp) {
      float* copy = slot_state(a.cp_slots[cp]);
      for (int64_t e = tid; e < head_floats; e += blockDim.x) copy[e] = S[e];
    }
  }
  for (int64_t e = tid; e < head_floats; e += blockDim.x) own[e] = S[e];
}

__global__ void delta_rule_gates_kernel(backend::cpu::DeltaRuleGatesArgs a) {
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= a.n_rows * a.n_heads) return;
  const int64_t r = t / a.n_heads, h = t % a.n_heads;
  const float x = a.a[r * a.a_stride + h] + a.dt_bias[h];
  // torch's softplus (beta 1, threshold 20): x above 20 is returned as is.
  const float softplus = x > 20.0f ? x : log1pf(expf(x));
  a.g[r * a.g_stride + h] = -expf(a.a_log[h]) * softplus;
  a.beta[r * a.beta_stride + h] = 1.0f / (1.0f + expf(-a.b[r * a.b_stride + h]));
}

// The pieces each sequence's rows fall into, as backend/cpu's
// gated_delta_rule walks them, and the checkpoints after each piece (a piece
// of 0 rows carries those at the sequence's first position).
std::vector<int32_t> plan_pieces(std::span<const ops::RecurrentSequence> sequences, int chunk, int32_t& pieces_at,
                                 int32_t& cps_at) {
  std::vector<int32_t> seqs, pieces, cps;
  for (const ops::RecurrentSequence& s : sequences) {
    const int32_t first_piece = int32_t(pieces.size() / 4);
    size_t next_split = 0, next_cp = 0;
    auto add_piece = [&](int64_t row, int32_t m, int64_t end_position) {
      const int32_t cp_begin = int32_t(cps.size());
      for (; next_cp < s.checkpoints.size() && s.checkpoints[next_cp].position == end_position; ++next_cp)
        cps.push_back(s.checkpoints[next_cp].slot);
      if (m == 0 && int32_t(cps.size()) == cp_begin) return;
      pieces.insert(pieces.end(), {int32_t(row), m, cp_begin, int32_t(cps.size())});
    };
    add_piece(s.first_row, 0, s.first_position);
    for (int32_t i = 0; i < s.n_rows;) {
      const int64_t position = int64_t(s.first_position) + i;
      int64_t end = std::min<int64_t>(s.first_position + s.n_rows, position + chunk - position % chunk);
      while (next_split < s.splits.size() && s.splits[next_split] <= position) ++next_split;
      if (next_split < s.splits.size()) end = std::min<int64_t>(end, s.splits[next_split]);
      if (next_cp < s.checkpoints.size()) end = std::min<int64_t>(end, s.checkpoints[next_cp].position);
      const int32_t m = int32_t(end - position);
      add_piece(s.first_row + i, m, end);
      i += m;
    }
    seqs.insert(seqs.end(), {s.state_slot, s.starts ? 1 : 0, first_piece, int32_t(pieces.size() / 4)});
  }
  pieces_at = int32_t(seqs.size());
  cps_at = pieces_at + int32_t(pieces.size());
  seqs.insert(seqs.end(), pieces.begin(), pieces.end());
  seqs.insert(seqs.end(), cps.begin(), cps.end());
  return seqs;
}

}  // namespace

void gated_delta_rule(const backend::cpu::GatedDeltaRuleArgs& a) {
  if (a.sequences.empty()) return;
  const int chunk = std::max(a.chunk_size, 1);
  BRIOCHE_CHECK(chunk <= kChunk, "gated_delta_rule (cuda): chunks of at most ", kChunk, " rows, asked for ", chunk);
  BRIOCHE_CHECK(a.sequences.size() <= 65535, "gated_delta_rule (cuda): at most 65535 sequences (grid y), got ",
                a.sequences.size());
  const SharedLayout layout(a.key_dim, a.value_dim);
  const size_t smem = size_t(layout.floats) * sizeof(float);
  int device = 0, max_smem = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  BRIOCHE_CHECK(smem <= size_t(max_smem), "gated_delta_rule (cuda): a head's state of ", a.key_dim, " x ", a.value_dim,
                " with its chunk scratch needs ", smem, " bytes of shared memory, the device has ", max_smem);
  static size_t smem_set = 48 * 1024;
  if (smem > smem_set) {
    CUDA_CHECK(cudaFuncSetAttribute(gated_delta_rule_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    smem_set = smem;
  }
  int32_t pieces_at = 0, cps_at = 0;
  const std::vector<int32_t> plan = plan_pieces(a.sequences, chunk, pieces_at, cps_at);
  const auto* words = static_cast<const int32_t*>(upload_cached(plan.data(), plan.size() * sizeof(int32_t)));
  const DeltaRuleKernelArgs args{.q = a.q,
                                 .k = a.k,
                                 .v = a.v,
                                 .g = a.g,
                                 .beta = a.beta,
                                 .state = a.state,
                                 .out = a.out,
                                 .q_stride = a.q_stride,
                                 .k_stride = a.k_stride,
                                 .v_stride = a.v_stride,
                                 .g_stride = a.g_stride,
                                 .beta_stride = a.beta_stride,
                                 .out_stride = a.out_stride,
                                 .heads_per_k_head = a.n_v_heads / a.n_k_heads,
                                 .key_dim = a.key_dim,
                                 .value_dim = a.value_dim,
                                 .q_scale = 1.0f / std::sqrt(float(a.key_dim)),
                                 .sequences = words,
                                 .pieces = words + pieces_at,
                                 .cp_slots = words + cps_at};
  const dim3 grid{unsigned(a.n_v_heads), unsigned(a.sequences.size()), 1u};
  gated_delta_rule_kernel<<<grid, kThreads, smem, detail::current_stream()>>>(args);
  CUDA_CHECK_LAUNCH();
}

void delta_rule_gates(const backend::cpu::DeltaRuleGatesArgs& a) {
  const int64_t total = a.n_rows * a.n_heads;
  if (total == 0) return;
  delta_rule_gates_kernel<<<unsigned((total + 255) / 256), 256, 0, detail::current_stream()>>>(a);
  CUDA_CHECK_LAUNCH();
}

}  // namespace brioche::cuda
