#include "pipeline/queue_transport.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace hippo::pipeline {

void QueueTransport::send(int from, const Instruction& message, std::span<const float> data) {
  {
    std::lock_guard lock(mutex_);
    queues_[{from, message.peer, channel(message.op)}].push_back(
        {message, std::vector<float>(data.begin(), data.end())});
  }
  arrived_.notify_all();
}

void QueueTransport::receive(int from, const Instruction& message, std::span<float> data) {
  std::unique_lock lock(mutex_);
  std::deque<Message>& queue = queues_[{from, message.peer, channel(message.op)}];
  arrived_.wait(lock, [&] { return aborted_ || !queue.empty(); });
  if (aborted_) throw std::runtime_error("pipeline aborted: another stage failed");
  Message got = std::move(queue.front());
  queue.pop_front();
  const std::string at = "stage " + std::to_string(message.peer) + " expected stage " +
                         std::to_string(from) + "'s " + describe(message);
  if (!(got.send == message)) throw std::runtime_error(at + ", got its " + describe(got.send));
  if (got.data.size() != data.size()) {
    throw std::runtime_error(at + " of " + std::to_string(data.size()) + " floats, got " +
                             std::to_string(got.data.size()));
  }
  std::copy(got.data.begin(), got.data.end(), data.begin());
}

void QueueTransport::abort() {
  {
    std::lock_guard lock(mutex_);
    aborted_ = true;
  }
  arrived_.notify_all();
}

size_t QueueTransport::pending() const {
  std::lock_guard lock(mutex_);
  size_t count = 0;
  for (const auto& [link, queue] : queues_) count += queue.size();
  return count;
}

}  // namespace hippo::pipeline
