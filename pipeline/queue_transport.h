// Transport between the stages of one process (CPU threads): a send copies the buffer into a
// queue per (sender, receiver, channel); a receive waits on that queue.
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "pipeline/interpreter.h"

namespace hippo::pipeline {

class QueueTransport : public Transport {
 public:
  void send(int from, const Instruction& message, std::span<const float> data) override;
  void receive(int from, const Instruction& message, std::span<float> data) override;
  void abort() override;

  // Messages sent and not yet received (0 after a complete program).
  size_t pending() const;

 private:
  struct Message {
    Instruction send;
    std::vector<float> data;
  };
  using Link = std::tuple<int, int, Channel>;  // sender, receiver, channel

  mutable std::mutex mutex_;
  std::condition_variable arrived_;
  std::map<Link, std::deque<Message>> queues_;
  bool aborted_ = false;
};

}  // namespace hippo::pipeline
