// A tiny fixed-partition thread pool for the CPU kernels. parallel_for splits [0, n) into at most
// threads() contiguous chunks; chunk i always runs on pool thread i (chunk 0 on the caller), and
// kernels write each output element from exactly one chunk, so results never depend on timing.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace hippo::kernels {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return threads_; }
  // From now on `threads` threads (>= 1): the pool's threads are ended and started anew. Never
  // while a parallel_for runs (a worker changes it between two steps of a job).
  void resize(int threads);

  // Calls fn(begin, end) on disjoint chunks covering [0, n), each at least `grain` long (except
  // when n < grain), and returns when all are done. fn must not throw.
  template <typename Fn>
  void parallel_for(int64_t n, int64_t grain, const Fn& fn) {
    int64_t chunks = grain > 0 ? (n + grain - 1) / grain : n;
    if (chunks > threads_) chunks = threads_;
    if (chunks <= 1) {
      if (n > 0) fn(int64_t{0}, n);
      return;
    }
    run(n, static_cast<int>(chunks), &fn,
        [](const void* f, int64_t b, int64_t e) { (*static_cast<const Fn*>(f))(b, e); });
  }

 private:
  using Thunk = void (*)(const void*, int64_t, int64_t);
  void run(int64_t n, int chunks, const void* fn, Thunk thunk);
  void start();
  void stop();
  void worker(int index, uint64_t seen);  // `seen`: the generation done when it started
  static void chunk(int64_t n, int chunks, int i, int64_t* begin, int64_t* end);

  int threads_;
  std::vector<std::thread> workers_;
  // A training step runs a few dozen short parallel_for calls, so waking a sleeping thread for
  // each (tens of microseconds) would cost more than the work: threads spin on generation_ and
  // pending_ for a while before they sleep on the condition variables.
  std::mutex mu_;
  std::condition_variable wake_, done_;
  std::atomic<uint64_t> generation_{0};  // a new job was published
  std::atomic<int> pending_{0};          // pool threads that have not finished the current job
  std::atomic<bool> stop_{false};
  // The current job: written by run() before it bumps generation_, read by pool threads after.
  int64_t n_ = 0;
  int chunks_ = 0;
  const void* fn_ = nullptr;
  Thunk thunk_ = nullptr;
};

}  // namespace hippo::kernels
