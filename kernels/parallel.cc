#include "kernels/parallel.h"

#include <stdexcept>
#include <string>

namespace hippo::kernels {

ThreadPool::ThreadPool(int threads) : threads_(threads) {
  if (threads < 1)
    throw std::invalid_argument("thread count must be >= 1, got " + std::to_string(threads));
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::chunk(int64_t n, int chunks, int i, int64_t* begin, int64_t* end) {
  *begin = n * i / chunks;
  *end = n * (i + 1) / chunks;
}

void ThreadPool::run(int64_t n, int chunks, const void* fn, Thunk thunk) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    n_ = n;
    chunks_ = chunks;
    fn_ = fn;
    thunk_ = thunk;
    pending_ = chunks - 1;
    ++generation_;
  }
  wake_.notify_all();
  int64_t begin, end;
  chunk(n, chunks, 0, &begin, &end);
  thunk(fn, begin, end);
  std::unique_lock<std::mutex> lock(mu_);
  done_.wait(lock, [this] { return pending_ == 0; });
}

void ThreadPool::worker(int index) {
  uint64_t seen = 0;
  for (;;) {
    int64_t n;
    int chunks;
    const void* fn;
    Thunk thunk;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      if (index >= chunks_) continue;  // this job has fewer chunks than threads
      n = n_;
      chunks = chunks_;
      fn = fn_;
      thunk = thunk_;
    }
    int64_t begin, end;
    chunk(n, chunks, index, &begin, &end);
    thunk(fn, begin, end);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_ == 0) done_.notify_one();
    }
  }
}

}  // namespace hippo::kernels
