// The whole tensor-parallel path on the CPU: rank 0's TensorParallelModel
// and a worker in run_tensor_parallel_worker, as two threads joined by a
// hand-made collective (tests/thread_collective.h), against the unsharded
// model — two sequences prefilled together, then greedy decode steps with
// an f16 KV cache (as on the GPU). This covers what the sharded-block test
// does not: the batch broadcast, the worker's KV cache, the stop message,
// the lm_head on rank 0.
//
// How close is close: sharding changes only the order of f32 sums (o_proj
// and down_proj add two half-length dot products; every other op is
// per-row or per-head and runs the same arithmetic; the CPU keeps f32
// activations for bf16 weights). Those ~1e-7 relative differences flip a few
// f16 roundings of the KV cache and grow through the random layers:
// measured worst logits NMSE 4.7e-11 (f32 weights) and 1.0e-11 (bf16),
// printed. Bound 1e-8 (200x headroom) with identical greedy tokens; a real
// sharding error (a wrong head or slice, the bias or residual added twice)
// gives NMSE above 1e-3.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <thread>

#include "model/llama.h"
#include "model/tensor_parallel.h"
#include "ops/device.h"
#include "thread_collective.h"
#include "tools/gen_model_lib.h"

namespace brioche::model {
namespace {

// GQA 8 heads over 4 KV heads, 4 layers: big enough for non-trivial sums.
const tools::ShapePreset kSmall{"small-tp", "llama", 512, 256, 512, 4, 8, 4, 32, 10000.0f, false, false};

struct Steps {
  std::vector<ForwardBatch> batches;  // the same inputs for both runs
  std::vector<std::vector<int32_t>> tables;
};

// Sequence s owns blocks [8s, 8s + 8) of 4 positions. Step 0 prefills 7 and
// 5 tokens; later steps decode one token each (fixed tokens: both runs get
// the same inputs whatever they predict).
ForwardBatch make_batch(int step, const std::vector<std::vector<int32_t>>& tables) {
  ForwardBatch b;
  const int lengths[2] = {7, 5};
  for (int s = 0; s < 2; ++s) {
    const int n = step == 0 ? lengths[s] : 1;
    const int past = step == 0 ? 0 : lengths[s] + step - 1;
    b.sequences.push_back({.first_row = b.n_rows(), .n_rows = n, .n_past = past, .block_table = tables[size_t(s)]});
    for (int i = 0; i < n; ++i) {
      b.tokens.push_back((37 * (past + i) + 11 * s + 5) % kSmall.vocab);
      b.positions.push_back(past + i);
      b.wants_logits.push_back(i + 1 == n);
    }
  }
  return b;
}

constexpr int kSteps = 6;

std::vector<Tensor> run_steps(Model& m, const std::vector<std::vector<int32_t>>& tables) {
  KvCache cache(m.config(), {.block_size = 4, .n_blocks = 16, .dtype = DType::F16});
  std::vector<Tensor> out;
  for (int step = 0; step < kSteps; ++step) {
    Tensor logits;
    m.forward(make_batch(step, tables), cache, logits);
    out.push_back(logits);
  }
  return out;
}

int argmax(const float* row, int n) { return int(std::max_element(row, row + n) - row); }

void expect_tp_matches(DType dtype) {
  const std::vector<std::vector<int32_t>> tables = {{0, 1, 2, 3, 4, 5, 6, 7}, {8, 9, 10, 11, 12, 13, 14, 15}};
  LlamaModel whole(tools::random_checkpoint(kSmall, dtype, 21));
  const std::vector<Tensor> want = run_steps(whole, tables);

  const Checkpoint full = tools::random_checkpoint(kSmall, dtype, 21);
  std::vector<Tensor> got;
  int64_t worker_forwards = -1;
  brioche::testing::ThreadRanks ranks(2);
  std::thread worker([&] {
    std::unique_lock<std::mutex> baton(ranks.baton);
    brioche::testing::ThreadCollective collective(ranks, 1, baton);
    LlamaModel shard(shard_checkpoint(full, {.rank = 1, .size = 2}));
    worker_forwards = run_tensor_parallel_worker(shard, collective);
  });
  {
    std::unique_lock<std::mutex> baton(ranks.baton);
    auto collective = std::make_unique<brioche::testing::ThreadCollective>(ranks, 0, baton);
    TensorParallelModel tp(std::make_unique<LlamaModel>(shard_checkpoint(full, {.rank = 0, .size = 2})),
                           std::move(collective));
    // Rank 0's cache holds only its KV heads: the engine must not copy K/V
    // between its blocks (sub-block prefix sharing) behind the workers' backs.
    EXPECT_FALSE(tp.kv_cache_is_whole());
    EXPECT_TRUE(tp.shard().kv_cache_is_whole());
    got = run_steps(tp, tables);
  }  // the stop message: the worker returns
  worker.join();
  EXPECT_EQ(worker_forwards, kSteps);

  double worst = 0;
  for (int step = 0; step < kSteps; ++step) {
    ASSERT_EQ(got[size_t(step)].shape(), want[size_t(step)].shape());
    double num = 0, den = 0;
    for (int64_t i = 0; i < want[size_t(step)].numel(); ++i) {
      const double a = got[size_t(step)].data_as<float>()[i], b = want[size_t(step)].data_as<float>()[i];
      num += (a - b) * (a - b);
      den += b * b;
    }
    worst = std::max(worst, num / den);
    if (std::getenv("TP_TEST_VERBOSE")) std::printf("step %d NMSE %.3g\n", step, num / den);
    for (int64_t r = 0; r < want[size_t(step)].dim(0); ++r)
      EXPECT_EQ(argmax(got[size_t(step)].row_as<float>(r), kSmall.vocab),
                argmax(want[size_t(step)].row_as<float>(r), kSmall.vocab))
          << "step " << step << " row " << r;
  }
  EXPECT_LT(worst, 1e-8) << std::string(dtype_name(dtype));
  std::printf("[ tp=2 vs tp=1 on the cpu, %s weights, f16 KV ] worst logits NMSE %.3g over %d steps\n",
              std::string(dtype_name(dtype)).c_str(), worst, kSteps);
}

TEST(TensorParallelModelCpu, TwoThreadRanksMatchTheWholeModelF32) { expect_tp_matches(DType::F32); }
TEST(TensorParallelModelCpu, TwoThreadRanksMatchTheWholeModelBf16) { expect_tp_matches(DType::BF16); }

}  // namespace
}  // namespace brioche::model
