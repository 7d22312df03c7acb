#include "kernels/parallel.h"

#include <stdexcept>
#include <string>

namespace hippo::kernels {

namespace {

void check_threads(int threads) {
  if (threads < 1)
    throw std::invalid_argument("thread count must be >= 1, got " + std::to_string(threads));
}

}  // namespace

ThreadPool::ThreadPool(int threads) : threads_(threads) {
  check_threads(threads);
  start();
}

ThreadPool::~ThreadPool() {
  stop();
}

void ThreadPool::resize(int threads) {
  check_threads(threads);
  if (threads == threads_) return;
  stop();
  threads_ = threads;
  start();
}

void ThreadPool::start() {
  stop_.store(false);
  // Started between jobs: each new thread waits for the generation after this one (read here,
  // not by the thread, which may start after the next job was published).
  const uint64_t seen = generation_.load(std::memory_order_acquire);
  for (int i = 1; i < threads_; ++i) workers_.emplace_back([this, i, seen] { worker(i, seen); });
}

void ThreadPool::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
  workers_.clear();
}

void ThreadPool::chunk(int64_t n, int chunks, int i, int64_t* begin, int64_t* end) {
  *begin = n * i / chunks;
  *end = n * (i + 1) / chunks;
}

namespace {

// About 100 microseconds of spinning (a pause is tens of cycles) before a thread sleeps.
constexpr int kSpins = 4000;

void pause() {
  __builtin_ia32_pause();
}

}  // namespace

void ThreadPool::run(int64_t n, int chunks, const void* fn, Thunk thunk) {
  n_ = n;
  chunks_ = chunks;
  fn_ = fn;
  thunk_ = thunk;
  // Every pool thread reports back, also those without a chunk, so none can still be reading
  // this job's fields when the next run() writes them.
  pending_.store(threads_ - 1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mu_);  // a thread about to sleep sees the new generation
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  int64_t begin, end;
  chunk(n, chunks, 0, &begin, &end);
  thunk(fn, begin, end);
  for (int spin = 0; pending_.load(std::memory_order_acquire) != 0; ++spin) {
    if (spin < kSpins) {
      pause();
      continue;
    }
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [this] { return pending_.load(std::memory_order_acquire) == 0; });
    break;
  }
}

void ThreadPool::worker(int index, uint64_t seen) {
  for (;;) {
    uint64_t current;
    for (int spin = 0; (current = generation_.load(std::memory_order_acquire)) == seen; ++spin) {
      if (stop_.load(std::memory_order_relaxed)) return;
      if (spin < kSpins) {
        pause();
        continue;
      }
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] {
        return stop_.load(std::memory_order_relaxed) ||
               generation_.load(std::memory_order_acquire) != seen;
      });
    }
    seen = current;
    if (index < chunks_) {
      int64_t begin, end;
      chunk(n_, chunks_, index, &begin, &end);
      thunk_(fn_, begin, end);
    }
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mu_);
      done_.notify_one();
    }
  }
}

}  // namespace hippo::kernels
