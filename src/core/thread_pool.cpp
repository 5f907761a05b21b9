#include "core/thread_pool.h"

#include <memory>
#include <utility>

#if defined(__x86_64__)
#include <immintrin.h>
#define BRIOCHE_PAUSE() _mm_pause()
#else
#define BRIOCHE_PAUSE() std::this_thread::yield()
#endif

namespace brioche {

thread_local bool ThreadPool::in_task_ = false;

namespace {
// Some tens of microseconds of spinning before a worker sleeps: long enough
// to bridge the gap between consecutive ops of one forward, short enough to
// give the core back on a busy machine.
constexpr int kSpinIterations = 2000;

std::unique_ptr<ThreadPool>& global_pool() {
  static std::unique_ptr<ThreadPool> pool;
  return pool;
}
}  // namespace

ThreadPool::ThreadPool(int n_threads) {
  n_threads = std::max(1, n_threads);
  for (int i = 0; i + 1 < n_threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_.store(true);
    claim_.store(pack(generation_ + 1, 0, 0));
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::work_on(uint32_t generation) {
  in_task_ = true;
  uint64_t word = claim_.load(std::memory_order_acquire);
  for (;;) {
    uint32_t gen = uint32_t(word >> 32);
    uint32_t n_tasks = uint32_t(word >> 16) & 0xffff;
    uint32_t next = uint32_t(word) & 0xffff;
    if (gen != generation || next >= n_tasks) break;
    if (!claim_.compare_exchange_weak(word, pack(gen, n_tasks, next + 1), std::memory_order_acq_rel)) continue;
    // A successful claim of an unfinished task keeps the job (fn, ctx) alive.
    // Once a task has thrown, the rest are claimed and counted, not run.
    if (!job_failed_.load(std::memory_order_acquire)) {
      try {
        job_fn_(job_ctx_, int(next));
      } catch (...) {
        if (!job_failed_.exchange(true, std::memory_order_acq_rel)) job_error_ = std::current_exception();
      }
    }
    tasks_done_.fetch_add(1, std::memory_order_acq_rel);
    word = claim_.load(std::memory_order_acquire);
  }
  in_task_ = false;
}

void ThreadPool::dispatch(int n_tasks, TaskFn fn, void* ctx) {
  job_fn_ = fn;
  job_ctx_ = ctx;
  job_failed_.store(false, std::memory_order_relaxed);
  job_error_ = nullptr;
  tasks_done_.store(0, std::memory_order_relaxed);
  const uint32_t generation = ++generation_;
  {
    // Publishing under the lock pairs with the sleepers' predicate check.
    std::lock_guard lock(mutex_);
    claim_.store(pack(generation, uint32_t(n_tasks), 0), std::memory_order_release);
  }
  if (sleepers_.load(std::memory_order_acquire) > 0) wake_.notify_all();
  work_on(generation);
  // Every task is claimed; wait for the ones still running elsewhere.
  for (int spin = 0; tasks_done_.load(std::memory_order_acquire) < n_tasks; ++spin) {
    if (spin < 4096) {
      BRIOCHE_PAUSE();
    } else {
      std::this_thread::yield();  // let a descheduled worker finish its task
    }
  }
  if (job_failed_.load(std::memory_order_acquire)) std::rethrow_exception(std::exchange(job_error_, nullptr));
}

void ThreadPool::worker_loop() {
  uint32_t seen = 0;
  for (;;) {
    auto current = [&] { return uint32_t(claim_.load(std::memory_order_acquire) >> 32); };
    uint32_t gen = current();
    for (int spin = 0; gen == seen && spin < kSpinIterations; ++spin) {
      BRIOCHE_PAUSE();
      gen = current();
    }
    if (gen == seen) {
      std::unique_lock lock(mutex_);
      sleepers_.fetch_add(1);
      wake_.wait(lock, [&] { return current() != seen; });
      sleepers_.fetch_sub(1);
      gen = current();
    }
    seen = gen;
    if (stopping_.load()) return;
    work_on(gen);
  }
}

ThreadPool& ThreadPool::global() {
  auto& pool = global_pool();
  if (!pool) pool = std::make_unique<ThreadPool>(int(std::max(1u, std::thread::hardware_concurrency())));
  return *pool;
}

void ThreadPool::configure_global(int n_threads) { global_pool() = std::make_unique<ThreadPool>(n_threads); }

}  // namespace brioche
