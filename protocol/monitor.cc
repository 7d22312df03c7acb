#include "protocol/monitor.h"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <utility>
#include <vector>

namespace hippo::protocol {

SocketMonitor::SocketMonitor(zmq::context_t& context, zmq::socket_t& watched, int events)
    : watched_(watched.handle()), events_(context, zmq::socket_type::pair) {
  std::string address = unique_inproc("monitor");
  if (zmq_socket_monitor(watched_, address.c_str(), events) != 0) throw zmq::error_t();
  events_.set(zmq::sockopt::linger, 0);
  events_.connect(address);
}

SocketMonitor::SocketMonitor(SocketMonitor&& other) noexcept
    : watched_(std::exchange(other.watched_, nullptr)), events_(std::move(other.events_)) {}

SocketMonitor& SocketMonitor::operator=(SocketMonitor&& other) noexcept {
  if (this != &other) {
    stop();
    watched_ = std::exchange(other.watched_, nullptr);
    events_ = std::move(other.events_);
  }
  return *this;
}

void SocketMonitor::stop() {
  // Its last events are queued to our PAIR, which frees them as it closes.
  if (watched_) zmq_socket_monitor(watched_, nullptr, 0);
  watched_ = nullptr;
}

std::optional<MonitorEvent> next_event(zmq::socket_t& monitor, int timeout_ms) {
  if (!wait_readable(monitor, timeout_ms)) return std::nullopt;
  std::vector<zmq::message_t> frames;
  do {
    zmq::message_t frame;
    if (!monitor.recv(frame, zmq::recv_flags::dontwait)) break;
    frames.push_back(std::move(frame));
  } while (frames.back().more());
  if (frames.size() < 2 || frames[0].size() < 6) return std::nullopt;
  MonitorEvent e;
  std::memcpy(&e.event, frames[0].data(), 2);
  std::memcpy(&e.value, static_cast<const char*>(frames[0].data()) + 2, 4);
  e.endpoint = frames[1].to_string();
  return e;
}

bool wait_readable(zmq::socket_t& socket, int timeout_ms) {
  zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
  try {
    return zmq::poll(&item, 1, std::chrono::milliseconds(timeout_ms)) > 0;
  } catch (const zmq::error_t& e) {
    if (e.num() == EINTR) return false;
    throw;
  }
}

std::string unique_inproc(const char* what) {
  static std::atomic<uint64_t> next{0};
  return std::string("inproc://hippo-") + what + "-" + std::to_string(next++);
}

}  // namespace hippo::protocol
