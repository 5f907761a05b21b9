#include "backend/cpu/embedding.h"

#include "backend/cpu/quant_ref.h"
#include "core/error.h"
#include "core/thread_pool.h"

namespace brioche::cpu {

void embedding(const EmbeddingArgs& a) {
  // Validate every id before writing anything, so a bad id leaves out untouched.
  for (int64_t i = 0; i < a.n_ids; ++i) {
    BRIOCHE_CHECK(a.ids[i] >= 0 && a.ids[i] < a.vocab, "embedding: token id ", a.ids[i], " at position ", i,
                  " is outside the table's vocabulary [0, ", a.vocab, ")");
  }
  const auto* table = static_cast<const uint8_t*>(a.table);
  ThreadPool::global().parallel_for(a.n_ids, 16, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i)
      dequantize_row_ref(a.dtype, table + int64_t(a.ids[i]) * a.row_bytes, a.out + i * a.ldo, a.hidden);
  });
}

}  // namespace brioche::cpu
