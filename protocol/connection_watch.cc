#include "protocol/connection_watch.h"

#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdio>
#include <vector>

namespace hippo::protocol {
namespace {

constexpr int kEvents = ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_CLOSED |
                        ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL;

// The bytes the kernel received on a TCP connection, or -1 (not TCP, or closed).
int64_t bytes_received(int fd) {
  tcp_info info{};
  socklen_t size = sizeof info;
  if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &size) != 0 ||
      size < offsetof(tcp_info, tcpi_bytes_received) + sizeof info.tcpi_bytes_received)
    return -1;
  return static_cast<int64_t>(info.tcpi_bytes_received);
}

std::string mib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

}  // namespace

ConnectionWatch::ConnectionWatch(zmq::context_t& context, zmq::socket_t& router, bool curve,
                                 ConnectionLimits limits, RefusalLog::Log log)
    : monitor_(context, router, kEvents), curve_(curve), limits_(limits), refuse_(log), log_(log) {}

void ConnectionWatch::delivered(int fd) {
  std::lock_guard lock(mutex_);
  auto it = connections_.find(fd);
  if (it == connections_.end()) return;
  int64_t received = bytes_received(fd);
  if (received >= 0) it->second.baseline = static_cast<uint64_t>(received);
}

int64_t ConnectionWatch::unfinished_bytes(int fd) const {
  std::lock_guard lock(mutex_);
  auto it = connections_.find(fd);
  if (it == connections_.end()) return -1;
  int64_t received = bytes_received(fd);
  if (received < 0) return -1;
  return std::max<int64_t>(0, received - static_cast<int64_t>(it->second.baseline));
}

void ConnectionWatch::check() {
  while (std::optional<MonitorEvent> e = next_event(monitor_.events(), 0)) {
    const int fd = static_cast<int>(e->value);
    std::lock_guard lock(mutex_);
    switch (e->event) {
      case ZMQ_EVENT_ACCEPTED:
        connections_[fd] = {e->endpoint, 0};  // counted from the connection's first byte
        break;
      case ZMQ_EVENT_DISCONNECTED:
      case ZMQ_EVENT_CLOSED:
        connections_.erase(fd);
        break;
      case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
        if (e->value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH)
          refuse_("refused a peer on " + e->endpoint +
                  (curve_ ? ": it does not use CURVE (a worker or client started with --insecure, "
                            "or not one of ours)"
                          : ": it uses CURVE, and this master runs without authentication "
                            "(--insecure): connect it with --insecure"));
        else
          refuse_("refused a peer on " + e->endpoint + ": its handshake failed (ZMTP error " +
                  std::to_string(e->value) + "; was it given this master's public key?)");
        break;
    }
  }
  std::vector<int> fds;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [fd, connection] : connections_) fds.push_back(fd);
  }
  // Measured one at a time, each under the lock only as long as its one system call, so that
  // delivered() (the master's thread, at each message) waits for no more than that.
  std::vector<std::pair<int64_t, int>> unfinished;  // (bytes, fd)
  int64_t total = 0;
  for (int fd : fds) {
    int64_t bytes = unfinished_bytes(fd);
    if (bytes <= 0) continue;
    unfinished.push_back({bytes, fd});
    total += bytes;
  }
  std::sort(unfinished.rbegin(), unfinished.rend());  // largest first
  for (const auto& [bytes, fd] : unfinished) {
    if (bytes > limits_.per_connection) {
      drop(fd, bytes, "the limit of one connection");
      total -= bytes;
    } else if (total > limits_.total) {
      drop(fd, bytes, "the connections together are over their limit");
      total -= bytes;
    }
  }
}

void ConnectionWatch::drop(int fd, int64_t unfinished, const char* why) {
  std::lock_guard lock(mutex_);
  log_("dropped a connection on " + connections_[fd].endpoint + ": " + mib(unfinished) +
       " received without a complete message (" + why + ", " + mib(limits_.per_connection) +
       " per connection, " + mib(limits_.total) + " in all)");
  // ZeroMQ owns the descriptor: shutting it down (never closing it) makes ZeroMQ see the end of
  // the connection and free the frames it held.
  ::shutdown(fd, SHUT_RDWR);
  connections_.erase(fd);
}

}  // namespace hippo::protocol
