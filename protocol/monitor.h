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

// Starts monitoring `socket` for `events` (ZMQ_EVENT_* bits) and returns the PAIR that receives
// them. Call before the socket binds or connects, so that no event is missed.
zmq::socket_t monitor_socket(zmq::context_t& context, zmq::socket_t& socket, int events);
// The next event, waiting up to timeout_ms for it (0: only one already there); nullopt when none
// came.
std::optional<MonitorEvent> next_event(zmq::socket_t& monitor, int timeout_ms);

// Waits up to timeout_ms (-1: forever) until the socket has a message; false on a timeout or a
// signal (the caller's loop checks its flag).
bool wait_readable(zmq::socket_t& socket, int timeout_ms);
// A fresh inproc address: a closed socket's address is released only later, by ZeroMQ's reaper.
std::string unique_inproc(const char* what);

}  // namespace hippo::protocol
