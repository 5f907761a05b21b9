// Data-parallel training (train/data_parallel.h): which rank runs which
// micro-batch, and the whole loop on the CPU with two ranks as two threads
// joined by a hand-made all-reduce — their adapter and losses equal one
// trainer's with twice the gradient accumulation (up to f32 summation
// order). On a GPU: one rank through a real NCCL communicator equals plain
// training exactly (the collective path without a second GPU).
#include <gtest/gtest.h>

#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <random>
#include <thread>

#include "model/device_weights.h"
#include "ops/collective.h"
#include "ops/device.h"
#include "ops/rendezvous.h"
#include "train/data_parallel.h"
#include "train/trainer.h"

namespace brioche::train {
namespace {

std::string golden(const std::string& name) { return std::string(BRIOCHE_SOURCE_DIR) + "/tests/train/golden/" + name; }

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

// The all-reduce of ranks that are threads of one process. The CPU ops share
// one thread pool that takes one dispatcher at a time, so the ranks compute
// in turns: a rank holds the baton while it computes and hands it over while
// it waits for the others' contributions.
class ThreadRanks {
 public:
  explicit ThreadRanks(int size) : size_(size) {}
  int size() const { return size_; }
  std::mutex baton;

  // Adds `values` (this rank's) and returns the sum over all ranks.
  std::vector<float> sum(std::unique_lock<std::mutex>& my_baton, const std::vector<float>& values) {
    std::unique_lock<std::mutex> lock(m_);
    if (sum_.empty()) sum_.assign(values.size(), 0.0f);
    EXPECT_EQ(sum_.size(), values.size()) << "ranks all-reduce different lengths";
    for (size_t i = 0; i < values.size(); ++i) sum_[i] += values[i];
    const uint64_t round = round_;
    if (++arrived_ == size_) {
      result_ = std::move(sum_);
      sum_.clear();
      arrived_ = 0;
      ++round_;
      done_.notify_all();
      return result_;
    }
    my_baton.unlock();  // let the others compute their part
    done_.wait(lock, [&] { return round_ != round; });
    std::vector<float> out = result_;
    lock.unlock();
    my_baton.lock();
    return out;
  }

 private:
  int size_;
  std::mutex m_;
  std::condition_variable done_;
  std::vector<float> sum_, result_;
  int arrived_ = 0;
  uint64_t round_ = 0;
};

class ThreadCollective final : public ops::Collective {
 public:
  ThreadCollective(ThreadRanks& ranks, int rank, std::unique_lock<std::mutex>& baton)
      : ranks_(ranks), rank_(rank), baton_(baton) {}
  int rank() const override { return rank_; }
  int size() const override { return ranks_.size(); }
  void all_reduce_sum(Tensor& t) override {
    EXPECT_TRUE(t.device() == Device::CPU && t.dtype() == DType::F32 && t.is_contiguous());
    const float* p = t.data_as<float>();
    std::vector<float> sum = ranks_.sum(baton_, std::vector<float>(p, p + t.numel()));
    std::copy(sum.begin(), sum.end(), t.data_as<float>());
  }
  void broadcast(std::span<int32_t>, int) override { ADD_FAILURE() << "training does not broadcast"; }

 private:
  ThreadRanks& ranks_;
  int rank_;
  std::unique_lock<std::mutex>& baton_;
};

// Prompts of random tokens; chosen responses use tokens 40..42, rejected 50..52.
Dataset pairs(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> any(3, 39), good(40, 42), bad(50, 52), len(2, 4);
  Dataset ds;
  for (int i = 0; i < n; ++i) {
    TokenizedPair p{.prompt = {1}};
    for (int k = len(rng) + 1; k > 0; --k) p.prompt.push_back(any(rng));
    for (int k = len(rng); k > 0; --k) p.chosen.push_back(good(rng));
    for (int k = len(rng); k > 0; --k) p.rejected.push_back(bad(rng));
    p.chosen.push_back(2), p.rejected.push_back(2);
    ds.pairs.push_back(std::move(p));
  }
  return ds;
}

TrainConfig config(const std::string& out) {
  TrainConfig c;
  c.data = "(in memory)";
  c.output = out;
  c.method = Method::ORPO;
  c.orpo_lambda = 0.5f;
  c.learning_rate = 1e-2f;
  c.iters = 6;
  c.batch_size = 2;
  c.rank = 4;
  c.lora_dropout = 0.1f;  // the mask seed follows the global micro-batch index
  c.head_chunk_size = 13;
  c.quiet = true;
  c.seed = 3;
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
  Trainer single(one, ck, {pairs(16, 1), pairs(6, 2)});
  const TrainResult want = single.run();

  TrainConfig two = config(out + "/two");
  two.grad_accumulation_steps = 2;
  ThreadRanks ranks(2);
  std::vector<std::unique_ptr<Trainer>> trainers;
  for (int r = 0; r < 2; ++r) trainers.push_back(std::make_unique<Trainer>(two, ck, TrainData{pairs(16, 1), pairs(6, 2)}));
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
  model::Checkpoint ck = model::load_safetensors_checkpoint(golden("tiny_llama"));
  model::move_weights(ck, Device::CUDA);
  const std::string out = std::string(BRIOCHE_BINARY_DIR) + "/train_data_parallel_cuda_test";
  std::filesystem::remove_all(out);
  TrainConfig c = config(out + "/plain");
  c.device = "cuda";
  c.grad_accumulation_steps = 2;
  Trainer plain(c, ck, {pairs(16, 1), pairs(6, 2)});
  const TrainResult want = plain.run();
  c.output = out + "/nccl";
  auto collective = ops::connect_nccl(
      {.rank = 0, .size = 1, .master = "127.0.0.1:" + std::to_string(ops::free_tcp_port()), .timeout_s = 30});
  Trainer dp(c, ck, {pairs(16, 1), pairs(6, 2)});
  dp.set_data_parallel(collective.get());
  const TrainResult got = dp.run();
  ASSERT_TRUE(got.last_eval && want.last_eval);
  EXPECT_EQ(got.last_eval->loss, want.last_eval->loss);
  const Tensor a = ops::to_device(dp.adapter().flat().a, Device::CPU), wa = ops::to_device(plain.adapter().flat().a, Device::CPU);
  const Tensor b = ops::to_device(dp.adapter().flat().b, Device::CPU), wb = ops::to_device(plain.adapter().flat().b, Device::CPU);
  EXPECT_EQ(relative_l2(a, wa), 0.0);
  EXPECT_EQ(relative_l2(b, wb), 0.0);
}

}  // namespace
}  // namespace brioche::train
