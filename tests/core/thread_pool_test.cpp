#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
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

// Every task throws, so workers throw too: the caller gets one of the
// exceptions (before the change a worker's exception called terminate),
// and no task runs after the call returns (before, the caller unwound while
// workers still ran the loop's tasks over its frame).
TEST(ThreadPool, ATaskThatThrowsFailsTheLoopNotTheProcess) {
  ThreadPool pool(4);
  for (int round = 0; round < 50; ++round) {
    std::atomic<int> started{0};
    EXPECT_THROW(pool.parallel_for(1000, 1,
                                   [&](int64_t, int64_t) {
                                     started.fetch_add(1);
                                     std::this_thread::sleep_for(std::chrono::microseconds(50));
                                     throw std::runtime_error("task failed");
                                   }),
                 std::runtime_error);
    const int after_return = started.load();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_EQ(started.load(), after_return) << "a task ran after the loop returned";
    EXPECT_LT(after_return, 1000) << "the tasks after the first failure should be skipped";
  }
}

TEST(ThreadPool, TheExceptionIsTheTasksOwn) {
  ThreadPool pool(3);
  try {
    pool.run(64, [&](int t) {
      if (t == 37) throw std::invalid_argument("task 37: bad input");
    });
    FAIL() << "expected the task's exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "task 37: bad input");
  }
}

// After a loop that threw, the next loops still spread over the workers
// (the thread that called the failed loop is not left marked as inside a
// task, which would run every later loop of that thread inline).
TEST(ThreadPool, LoopsAfterAFailureStillUseTheWorkers) {
  ThreadPool pool(4);
  EXPECT_THROW(pool.run(16, [&](int) { throw std::runtime_error("x"); }), std::runtime_error);
  std::mutex m;
  std::set<std::thread::id> threads;
  std::atomic<int> entered{0};
  pool.run(4, [&](int) {
    {
      std::lock_guard lock(m);
      threads.insert(std::this_thread::get_id());
    }
    entered.fetch_add(1);
    // Hold each task until another thread has one too (or 2 s pass): run
    // inline, the caller would take all four alone.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (std::chrono::steady_clock::now() < deadline) {
      {
        std::lock_guard lock(m);
        if (threads.size() >= 2) break;
      }
      std::this_thread::yield();
    }
  });
  EXPECT_EQ(entered.load(), 4);
  EXPECT_GE(threads.size(), 2u);
}

}  // namespace
}  // namespace brioche
