// Embedding lookup: rows of a table of any dtype, decoded to f32 on the device.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/graph.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/quant_decode.cuh"

namespace brioche::cuda {

namespace {

// Block per id; thread per 32-element chunk of the row.
template <DType T>
__global__ void embedding_kernel(const uint8_t* table, size_t row_bytes, int64_t hidden, const int32_t* ids, float* out,
                                 int64_t ldo) {
  detail::pdl_prologue();
  const uint8_t* row = table + int64_t(ids[blockIdx.x]) * row_bytes;
  float* y = out + blockIdx.x * ldo;
  for (int64_t c = threadIdx.x; c < hidden / 32; c += blockDim.x) {
    float v[32];
    detail::Decoder<T>::chunk(row, c, v);
#pragma unroll
    for (int i = 0; i < 32; ++i) y[c * 32 + i] = v[i];
  }
  // Plain types may have a hidden size that is not a multiple of 32.
  if constexpr (!dtype_info(T).quantized) {
    for (int64_t i = hidden / 32 * 32 + threadIdx.x; i < hidden; i += blockDim.x) {
      if constexpr (T == DType::F32)
        y[i] = reinterpret_cast<const float*>(row)[i];
      else if constexpr (T == DType::F16)
        y[i] = __half2float(reinterpret_cast<const __half*>(row)[i]);
      else
        y[i] = __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(row)[i]);
    }
  }
}

}  // namespace

void embedding(const cpu::EmbeddingArgs& a) {
  for (int64_t i = 0; i < a.n_ids; ++i) {
    BRIOCHE_CHECK(a.ids[i] >= 0 && a.ids[i] < a.vocab, "embedding: token id ", a.ids[i], " at position ", i,
                  " is outside the table's vocabulary [0, ", a.vocab, ")");
  }
  if (a.n_ids == 0) return;
  const DecodeBinding* bound = decode_binding();
  BRIOCHE_CHECK(!bound || bound->n_rows == a.n_ids, "embedding: ", a.n_ids, " ids but the decode binding has ",
                bound ? bound->n_rows : 0, " rows");
  auto* ids = bound ? bound->tokens : static_cast<const int32_t*>(upload_cached(a.ids, size_t(a.n_ids) * 4));
  bool ok = detail::visit_decodable(a.dtype, [&]<DType T>() {
    detail::launch_dependent(embedding_kernel<T>, unsigned(a.n_ids), 128, 0, static_cast<const uint8_t*>(a.table),
                             a.row_bytes, a.hidden, ids, a.out, a.ldo);
  });
  BRIOCHE_CHECK(ok, "embedding: cannot decode a ", dtype_name(a.dtype), " table");
}

}  // namespace brioche::cuda
