#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace brioche {
namespace {

TEST(ThreadPool, EveryIndexRunsExactlyOnce) {
  ThreadPool pool(4);
  for (int round = 0; round < 200; ++round) {
    std::vector<std::atomic<int>> hits(1000);
    pool.parallel_for(1000, 7, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
    });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  }
}

TEST(ThreadPool, NestedLoopsRunInline) {
  ThreadPool pool(3);
  std::atomic<int> total{0};
  pool.run(6, [&](int) { pool.run(5, [&](int) { total.fetch_add(1); }); });
  EXPECT_EQ(total.load(), 30);
}

}  // namespace
}  // namespace brioche
