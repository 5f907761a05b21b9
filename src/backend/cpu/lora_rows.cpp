#include "backend/cpu/lora_rows.h"

#include <array>
#include <vector>

#include "backend/cpu/vec_f32.h"
#include "core/thread_pool.h"

namespace brioche::backend::cpu {

void lora_rows_add(const LoraRowsArgs& a) {
  // One task per row: the row's u = A·x (rank dot products over `in`), then
  // y += Σ_k u_k · bt[k] (rank contiguous axpys over `out`). A decode step's
  // rows are a few dozen tasks of a few hundred thousand flops each.
  std::vector<std::pair<int32_t, int32_t>> rows;  // (segment, row)
  for (int32_t s = 0; s < a.n_segments; ++s)
    for (int32_t i = 0; i < a.segments[s].n_rows; ++i) rows.emplace_back(s, a.segments[s].first_row + i);
  ThreadPool::global().run(int(rows.size()), [&](int task) {
    const auto [s, row] = rows[size_t(task)];
    const LoraRowsSegment& seg = a.segments[s];
    const float* x = a.x + int64_t(row) * a.ldx;
    float* y = a.y + int64_t(row) * a.ldy;
    std::array<float, kMaxLoraRowsRank> u;
    for (int32_t k = 0; k < seg.rank; ++k) u[size_t(k)] = dot_f32(seg.a + int64_t(k) * a.in, x, a.in);
    for (int32_t k = 0; k < seg.rank; ++k) axpy_f32(y, u[size_t(k)], seg.bt + int64_t(k) * a.out, a.out);
  });
}

}  // namespace brioche::backend::cpu
