// ZeroMQ socket monitors (zmq_socket_monitor): a PAIR socket that receives the connection events
// of one watched socket. A socket has at most one monitor (a second one replaces the first), so
// each socket's events have one reader: HandshakeWatch (auth.h) for a client's socket,
// ConnectionWatch (connection_watch.h) for the master's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <zmq.hpp>

namespace hippo::protocol {

// An event: [u16 event, u32 value][endpoint]. The value is a file descriptor for ACCEPTED,
// DISCONNECTED and CLOSED, an error or status code for the handshake failures.
struct MonitorEvent {
  uint16_t event = 0;
  uint32_t value = 0;
  std::string endpoint;
};

// The monitor of one socket: a PAIR that receives its `events` (ZMQ_EVENT_* bits). Create it
// before the socket binds or connects, so that no event is missed, and end it while the watched
// socket is still open (declare it after that socket): it stops the monitoring first, because
// libzmq leaks an event that the watched socket sends (as it closes) to a monitor already closed.
class SocketMonitor {
 public:
  SocketMonitor(zmq::context_t& context, zmq::socket_t& watched, int events);
  SocketMonitor(SocketMonitor&& other) noexcept;
  SocketMonitor& operator=(SocketMonitor&& other) noexcept;  // stops this one's monitoring first
  ~SocketMonitor() { stop(); }
  // The PAIR to read (next_event) and to poll.
  zmq::socket_t& events() { return events_; }

 private:
  void stop();

  void* watched_;  // the watched socket's handle (it stays the same when its socket_t is moved)
  zmq::socket_t events_;
};
// The next event, waiting up to timeout_ms for it (0: only one already there); nullopt when none
// came.
std::optional<MonitorEvent> next_event(zmq::socket_t& monitor, int timeout_ms);

// Waits up to timeout_ms (-1: forever) until the socket has a message; false on a timeout or a
// signal (the caller's loop checks its flag).
bool wait_readable(zmq::socket_t& socket, int timeout_ms);
// A fresh inproc address: a closed socket's address is released only later, by ZeroMQ's reaper.
std::string unique_inproc(const char* what);

}  // namespace hippo::protocol
