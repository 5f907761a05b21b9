// Data-parallel training (train/data_parallel.h): which rank runs which
// micro-batch, and the whole loop on the CPU with two ranks as two threads
// joined by a hand-made all-reduce — their adapter and losses equal one
// trainer's with twice the gradient accumulation (up to f32 summation
// order). On a GPU: one rank through a real NCCL communicator equals plain
// training exactly (the collective path without a second GPU).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <thread>

#include "model/device_weights.h"
#include "ops/collective.h"
#include "ops/device.h"
#include "ops/rendezvous.h"
#include "train/data_parallel.h"
#include "thread_collective.h"
#include "train/trainer.h"
#include "train/train_test_data.h"

namespace brioche::train {
namespace {

using testing::ThreadCollective;
using testing::ThreadRanks;

TEST(DataParallelShare, EveryMicroBatchRunsOnExactlyOneRank) {
  for (int size : {1, 2, 3, 4}) {
    for (int accum : {1, 2, 5}) {
      std::vector<int> runs_on(size_t(size * accum), 0), per_rank(size_t(size), 0);
      for (int r = 0; r < size; ++r) {
        const DataParallelShare s{.rank = r, .size = size, .grad_accumulation = accum};
        EXPECT_EQ(s.micro_batches_per_step(), size * accum);
        EXPECT_DOUBLE_EQ(s.grad_scale(), 1.0 / (size * accum));
        for (int g = 0; g < s.micro_batches_per_step(); ++g)
          if (s.runs(g)) ++runs_on[size_t(g)], ++per_rank[size_t(r)];
      }
      for (int n : runs_on) EXPECT_EQ(n, 1) << size << " ranks, accumulation " << accum;
      for (int n : per_rank) EXPECT_EQ(n, accum) << size << " ranks, accumulation " << accum;
    }
  }
}

TrainConfig config(const std::string& out) {
  TrainConfig c = tiny_orpo_config(out);
  c.iters = 6;
  c.lora_dropout = 0.1f;  // the mask seed follows the global micro-batch index
  return c;
}

double relative_l2(const Tensor& got, const Tensor& want) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double d = double(got.data_as<float>()[i]) - want.data_as<float>()[i];
    num += d * d;
    den += double(want.data_as<float>()[i]) * want.data_as<float>()[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

TEST(DataParallelTrainer, TwoRanksEqualOneWithDoubleAccumulation) {
  model::Checkpoint ck = model::load_safetensors_checkpoint(golden("tiny_llama"));
  const std::string out = std::string(BRIOCHE_BINARY_DIR) + "/train_data_parallel_test";
  std::filesystem::remove_all(out);

  TrainConfig one = config(out + "/one");
  one.grad_accumulation_steps = 4;
  Trainer single(one, ck, {synthetic_pairs(16, 1), synthetic_pairs(6, 2)});
  const TrainResult want = single.run();

  TrainConfig two = config(out + "/two");
  two.grad_accumulation_steps = 2;
  ThreadRanks ranks(2);
  std::vector<std::unique_ptr<Trainer>> trainers;
  for (int r = 0; r < 2; ++r)
    trainers.push_back(std::make_unique<Trainer>(two, ck, TrainData{synthetic_pairs(16, 1), synthetic_pairs(6, 2)}));
  std::vector<TrainResult> got(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      std::unique_lock<std::mutex> baton(ranks.baton);
      ThreadCollective collective(ranks, r, baton);
      trainers[size_t(r)]->set_data_parallel(&collective);
      got[size_t(r)] = trainers[size_t(r)]->run();
    });
  }
  for (std::thread& t : threads) t.join();

  // Rank 0 evaluates and writes; rank 1 does neither.
  ASSERT_TRUE(got[0].last_eval && want.last_eval);
  EXPECT_FALSE(got[1].last_eval);
  EXPECT_TRUE(std::filesystem::exists(out + "/two/adapter_model.safetensors"));
  EXPECT_TRUE(std::filesystem::exists(out + "/two/metrics.json"));
  EXPECT_NEAR(got[0].last_eval->loss, want.last_eval->loss, 1e-5 * std::abs(want.last_eval->loss));
  EXPECT_NEAR(got[0].first_eval->loss, want.first_eval->loss, 1e-7 * std::abs(want.first_eval->loss));
  // Every rank ends with the same factors, equal to the single trainer's.
  const LoraFlat& w = single.adapter().flat();
  for (int r = 0; r < 2; ++r) {
    const LoraFlat& f = trainers[size_t(r)]->adapter().flat();
    EXPECT_LT(relative_l2(f.a, w.a), 1e-5) << "rank " << r;
    EXPECT_LT(relative_l2(f.b, w.b), 1e-5) << "rank " << r;
  }
  std::printf("[ data parallel 2 ranks vs 1 ] final loss %.7f vs %.7f, B rel. L2 %.2e\n", got[0].last_eval->loss,
              want.last_eval->loss, relative_l2(trainers[0]->adapter().flat().b, w.b));
}

TEST(CudaDataParallel, OneRankThroughNcclEqualsPlainTraining) {
  if (!ops::cuda_available()) GTEST_SKIP() << "skipped: no CUDA device";
  // The CUDA training attention takes head_dim 64 or 128 (tiny_llama has 8).
  model::Checkpoint ck = tiny_d64_checkpoint();
  model::move_weights(ck, Device::CUDA);
  const std::string out = std::string(BRIOCHE_BINARY_DIR) + "/train_data_parallel_cuda_test";
  std::filesystem::remove_all(out);
  TrainConfig c = config(out + "/plain");
  c.device = "cuda";
  c.grad_accumulation_steps = 2;
  Trainer plain(c, ck, {synthetic_pairs(16, 1), synthetic_pairs(6, 2)});
  const TrainResult want = plain.run();
  c.output = out + "/nccl";
  auto collective = ops::connect_nccl(
      {.rank = 0, .size = 1, .master = "127.0.0.1:" + std::to_string(ops::free_tcp_port()), .timeout_s = 30});
  Trainer dp(c, ck, {synthetic_pairs(16, 1), synthetic_pairs(6, 2)});
  dp.set_data_parallel(collective.get());
  const TrainResult got = dp.run();
  ASSERT_TRUE(got.last_eval && want.last_eval);
  EXPECT_EQ(got.last_eval->loss, want.last_eval->loss);
  const Tensor a = ops::to_device(dp.adapter().flat().a, Device::CPU),
               wa = ops::to_device(plain.adapter().flat().a, Device::CPU);
  const Tensor b = ops::to_device(dp.adapter().flat().b, Device::CPU),
               wb = ops::to_device(plain.adapter().flat().b, Device::CPU);
  EXPECT_EQ(relative_l2(a, wa), 0.0);
  EXPECT_EQ(relative_l2(b, wb), 0.0);
}

}  // namespace
}  // namespace brioche::train
