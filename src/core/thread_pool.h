// A fixed pool of worker threads for data-parallel loops.
//
// Decode runs hundreds of short parallel loops per token, so dispatch cost
// matters: workers spin briefly before sleeping, tasks are claimed with one
// compare-and-swap, and the calling thread works too. The caller waits for
// the tasks to be done, not for every worker to show up: on an oversubscribed
// machine a descheduled worker simply misses the loop instead of stalling it.
// A loop started from inside a task runs inline (no nesting).
//
// A task that throws fails its loop, not the process: the first exception is
// kept, the loop's tasks not yet started are skipped, and the caller gets the
// exception once every task that did start has finished (so no thread is
// still inside the loop's frame when the caller unwinds it).
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace brioche {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return int(workers_.size()) + 1; }

  // Calls fn(task) for every task in [0, n_tasks), spread over the threads.
  template <typename Fn>
  void run(int n_tasks, Fn&& fn) {
    if (n_tasks <= 0) return;
    if (n_tasks == 1 || workers_.empty() || in_task_) {
      for (int t = 0; t < n_tasks; ++t) fn(t);
      return;
    }
    auto call = [](void* ctx, int task) { (*static_cast<std::remove_reference_t<Fn>*>(ctx))(task); };
    // The claim word holds 16-bit task counts: run huge loops in rounds.
    constexpr int kMaxTasks = 0xffff;
    for (int first = 0; first < n_tasks; first += kMaxTasks) {
      int count = std::min(kMaxTasks, n_tasks - first);
      auto shifted = [&](int t) { fn(first + t); };
      auto call_shifted = [](void* ctx, int task) { (*static_cast<decltype(shifted)*>(ctx))(task); };
      if (first == 0 && count == n_tasks) {
        dispatch(count, call, static_cast<void*>(&fn));
      } else {
        dispatch(count, call_shifted, static_cast<void*>(&shifted));
      }
    }
  }

  // Splits [0, n) into about size() * 4 chunks of at least `grain` items and
  // calls fn(begin, end) for each.
  template <typename Fn>
  void parallel_for(int64_t n, int64_t grain, Fn&& fn) {
    if (n <= 0) return;
    grain = std::max<int64_t>(grain, 1);
    int64_t max_chunks = (n + grain - 1) / grain;
    int64_t chunks = std::min<int64_t>(max_chunks, int64_t(size()) * 4);
    if (chunks <= 1) {
      fn(int64_t(0), n);
      return;
    }
    int64_t per = (n + chunks - 1) / chunks;
    run(int(chunks), [&](int c) {
      int64_t begin = int64_t(c) * per;
      int64_t end = std::min(n, begin + per);
      if (begin < end) fn(begin, end);
    });
  }

  // The process-wide pool used by CPU ops. Sized once (e.g. from --threads)
  // before first use; defaults to the number of hardware threads.
  static ThreadPool& global();
  static void configure_global(int n_threads);

 private:
  using TaskFn = void (*)(void*, int);
  void dispatch(int n_tasks, TaskFn fn, void* ctx);
  void worker_loop();
  // Claims and runs tasks of job `generation` until none is left (or the job
  // is no longer current); a task's exception is kept in job_error_.
  void work_on(uint32_t generation);

  // The current job's claim word: generation (32 bits) | task count (16) |
  // next task index (16). Packing all three makes a claim one CAS that can
  // never take a task of a newer job with an older job's count.
  static uint64_t pack(uint32_t generation, uint32_t n_tasks, uint32_t next) {
    return (uint64_t(generation) << 32) | (uint64_t(n_tasks) << 16) | next;
  }

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::atomic<uint64_t> claim_{0};
  std::atomic<int> tasks_done_{0};
  std::atomic<bool> stopping_{false};
  std::atomic<int> sleepers_{0};
  uint32_t generation_ = 0;  // owned by the dispatching thread
  // Valid while a job of the current generation has unfinished tasks.
  TaskFn job_fn_ = nullptr;
  void* job_ctx_ = nullptr;
  // The job's first exception: job_failed_ claims the right to write
  // job_error_, which the dispatching thread reads once every task is done
  // (tasks_done_'s release/acquire orders the write before the read).
  std::atomic<bool> job_failed_{false};
  std::exception_ptr job_error_;
  static thread_local bool in_task_;
};

}  // namespace brioche
