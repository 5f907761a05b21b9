// An all-reduce for tests whose ranks are threads of one process (no NCCL):
// tensor-parallel and data-parallel code run whole, on the CPU.
//
// The CPU ops share one thread pool that takes one dispatcher at a time, so
// the ranks compute in turns: a rank holds the baton (lock it before the
// rank's work starts) while it computes and hands it over while it waits for
// the others' contributions.
#pragma once

#include <gtest/gtest.h>

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <vector>

#include "ops/collective.h"

namespace brioche::testing {

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
  // Rank `root`'s words to every rank (through the same sum: the others add zeros).
  void broadcast(std::span<int32_t> words, int root) override {
    std::vector<float> mine(words.size(), 0.0f);
    if (rank_ == root)
      for (size_t i = 0; i < words.size(); ++i) mine[i] = float(words[i]);  // exact below 2^24
    std::vector<float> sum = ranks_.sum(baton_, mine);
    for (size_t i = 0; i < words.size(); ++i) words[i] = int32_t(sum[i]);
  }

 private:
  ThreadRanks& ranks_;
  int rank_;
  std::unique_lock<std::mutex>& baton_;
};

}  // namespace brioche::testing
