#include "core/thread_pool.h"

#include <memory>

#if defined(__x86_64__)
#include <immintrin.h>
#define BRIOCHE_PAUSE() _mm_pause()
#else
#define BRIOCHE_PAUSE() std::this_thread::yield()
#endif

namespace brioche {

thread_local bool ThreadPool::in_task_ = false;

namespace {
// About 100 µs of spinning before a worker sleeps: long enough to bridge the
// gap between consecutive ops of one forward, short enough to idle politely.
constexpr int kSpinIterations = 20000;

std::unique_ptr<ThreadPool>& global_pool() {
  static std::unique_ptr<ThreadPool> pool;
  return pool;
}
}  // namespace

ThreadPool::ThreadPool(int n_threads) {
  n_threads = std::max(1, n_threads);
  for (int i = 0; i + 1 < n_threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_.store(true);
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::work_on_current_job() {
  in_task_ = true;
  for (;;) {
    int task = next_task_.fetch_add(1, std::memory_order_relaxed);
    if (task >= job_tasks_) break;
    job_fn_(job_ctx_, task);
  }
  in_task_ = false;
}

void ThreadPool::dispatch(int n_tasks, TaskFn fn, void* ctx) {
  job_fn_ = fn;
  job_ctx_ = ctx;
  job_tasks_ = n_tasks;
  next_task_.store(0, std::memory_order_relaxed);
  workers_done_.store(0, std::memory_order_relaxed);
  {
    // Publishing under the lock pairs with the sleepers' predicate check.
    std::lock_guard lock(mutex_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  if (sleepers_.load(std::memory_order_acquire) > 0) wake_.notify_all();
  work_on_current_job();
  const int n_workers = int(workers_.size());
  while (workers_done_.load(std::memory_order_acquire) < n_workers) BRIOCHE_PAUSE();
}

void ThreadPool::worker_loop(int) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int spin = 0; gen == seen && spin < kSpinIterations; ++spin) {
      BRIOCHE_PAUSE();
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      std::unique_lock lock(mutex_);
      sleepers_.fetch_add(1);
      wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      sleepers_.fetch_sub(1);
      gen = generation_.load(std::memory_order_acquire);
    }
    seen = gen;
    if (stopping_.load()) return;
    work_on_current_job();
    workers_done_.fetch_add(1, std::memory_order_release);
  }
}

ThreadPool& ThreadPool::global() {
  auto& pool = global_pool();
  if (!pool) pool = std::make_unique<ThreadPool>(int(std::max(1u, std::thread::hardware_concurrency())));
  return *pool;
}

void ThreadPool::configure_global(int n_threads) {
  global_pool() = std::make_unique<ThreadPool>(n_threads);
}

}  // namespace brioche
