#include "protocol/connection_watch.h"

#include <arpa/inet.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdio>
#include <limits>
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

// The address of a connection's peer, without its port; "local" for a unix socket (ipc://).
std::string peer_address(int fd) {
  sockaddr_storage address{};
  socklen_t size = sizeof address;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&address), &size) != 0) return "unknown";
  char text[INET6_ADDRSTRLEN] = "";
  if (address.ss_family == AF_INET)
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&address)->sin_addr, text, sizeof text);
  else if (address.ss_family == AF_INET6)
    inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&address)->sin6_addr, text, sizeof text);
  else
    return "local";
  return text;
}

std::string mib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

}  // namespace

int64_t raise_open_file_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return -1;
  if (limit.rlim_cur < limit.rlim_max) {
    const rlimit raised{limit.rlim_max, limit.rlim_max};
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  return limit.rlim_cur == RLIM_INFINITY ? std::numeric_limits<int64_t>::max()
                                         : static_cast<int64_t>(limit.rlim_cur);
}

ConnectionWatch::ConnectionWatch(zmq::context_t& context, zmq::socket_t& router, bool curve,
                                 ConnectionLimits limits, RefusalLog::Log log)
    : monitor_(context, router, kEvents), curve_(curve), limits_(limits), refuse_(log), log_(log) {}

void ConnectionWatch::delivered(int fd) {
  std::lock_guard lock(mutex_);
  auto it = connections_.find(fd);
  if (it == connections_.end()) return;
  it->second.spoken = true;
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
  bool accepted = false;
  while (std::optional<MonitorEvent> e = next_event(monitor_.events(), 0)) {
    const int fd = static_cast<int>(e->value);
    std::lock_guard lock(mutex_);
    switch (e->event) {
      case ZMQ_EVENT_ACCEPTED:
        // Bytes counted from the connection's first one; silent until its first message.
        connections_[fd] = {e->endpoint, peer_address(fd), accepted_++, false, 0};
        accepted = true;
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
  if (accepted) drop_silent();  // only an accepted connection adds a silent one
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

void ConnectionWatch::drop_silent() {
  std::lock_guard lock(mutex_);
  std::vector<std::pair<uint64_t, int>> silent;  // (order of accepting, fd)
  std::map<std::string, int> per_source;
  for (const auto& [fd, connection] : connections_) {
    if (connection.spoken) continue;
    silent.push_back({connection.accepted, fd});
    ++per_source[connection.source];
  }
  std::sort(silent.begin(), silent.end());  // oldest first
  int total = static_cast<int>(silent.size());
  for (const auto& [order, fd] : silent) {
    const std::string source = connections_[fd].source;
    int& from_source = per_source[source];
    if (from_source <= limits_.silent_per_source && total <= limits_.silent_total) continue;
    // One line per address (RefusalLog counts its repeats), however many are dropped.
    refuse_("dropped connections from " + source +
            " that had not sent a message (a handshake not finished, or nothing said): at most " +
            std::to_string(limits_.silent_per_source) + " such connections per address, " +
            std::to_string(limits_.silent_total) + " in all; the oldest go first");
    ::shutdown(fd, SHUT_RDWR);  // as drop() does
    connections_.erase(fd);
    --from_source;
    --total;
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
