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
  // What dequantize_row_ref would refuse, refused here: an exception thrown
  // in a worker thread of the loop below ends the process.
  BRIOCHE_CHECK(a.dtype != DType::I32, "embedding: the table's dtype i32 is an index type, not a float storage type");
  BRIOCHE_CHECK(a.hidden % dtype_info(a.dtype).block_elems == 0, "embedding: rows of ", a.hidden,
                " elements are not whole ", dtype_name(a.dtype), " blocks of ", dtype_info(a.dtype).block_elems);
  const auto* table = static_cast<const uint8_t*>(a.table);
  ThreadPool::global().parallel_for(a.n_ids, 16, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i)
      dequantize_row_ref(a.dtype, table + int64_t(a.ids[i]) * a.row_bytes, a.out + i * a.ldo, a.hidden);
  });
}

}  // namespace brioche::cpu
