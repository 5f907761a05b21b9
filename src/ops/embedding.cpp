#include "ops/embedding.h"

#include "backend/cpu/embedding.h"
#include "core/error.h"
#if BRIOCHE_CUDA
#include "backend/cuda/kernels.h"
#endif

namespace brioche::ops {

void embedding(const Tensor& table, std::span<const int32_t> ids, Tensor& out) {
  out.note_written();
  BRIOCHE_CHECK(table.defined() && out.defined(), "embedding: table and out must be defined");
  BRIOCHE_CHECK(table.rank() == 2, "embedding: table must be [vocab, hidden], got ", table.describe());
  BRIOCHE_CHECK(out.rank() == 2 && out.dtype() == DType::F32, "embedding: out must be f32 [n_ids, hidden], got ",
                out.describe());
  const int64_t hidden = table.dim(1);
  BRIOCHE_CHECK(out.dim(0) == int64_t(ids.size()) && out.dim(1) == hidden, "embedding: out must be [", ids.size(), ", ",
                hidden, "], got ", out.describe());
  BRIOCHE_CHECK(hidden <= 1 || out.stride(1) == 4, "embedding: out rows must be contiguous, got ", out.describe());
  BRIOCHE_CHECK(out.device() == table.device(), "embedding: table ", table.describe(), " and out ", out.describe(),
                " are on different devices");
  const cpu::EmbeddingArgs args{.dtype = table.dtype(),
                                .table = table.data(),
                                .row_bytes = size_t(table.stride(0)),
                                .vocab = table.dim(0),
                                .hidden = hidden,
                                .ids = ids.data(),
                                .n_ids = int64_t(ids.size()),
                                .out = out.data_as<float>(),
                                .ldo = out.stride(0) / 4};
  switch (table.device()) {
    case Device::CPU: cpu::embedding(args); return;
    case Device::CUDA:
#if BRIOCHE_CUDA
      cuda::embedding(args);  // ids are validated on the host, then uploaded
      return;
#else
      fail("embedding: table ", table.describe(), " is on CUDA but the CUDA backend is not built");
#endif
  }
}

}  // namespace brioche::ops
