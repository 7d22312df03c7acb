// The master's connections, as its ROUTER's monitor reports them (monitor.h).
//
// ZeroMQ limits each frame (kMaxMessageBytes) but not a message of many frames: the frames of a
// message that never ends stay in ZeroMQ's memory, unseen by the master, without bound. So the
// watch counts, for each TCP connection, the bytes the kernel received on it since the last
// complete message the master read from it (TCP_INFO's tcpi_bytes_received; a message names its
// connection by ZMQ_SRCFD): a connection over the per-connection limit, or the largest ones while
// all of them together are over the total limit, is shut down, and ZeroMQ frees what it held.
// Linux counts no bytes for unix sockets, so ipc:// connections (local processes only) are not
// limited.
//
// It also logs the handshakes that fail before authentication (a peer without CURVE).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <zmq.hpp>

#include "protocol/auth.h"
#include "protocol/monitor.h"
#include "protocol/wire.h"

namespace hippo::protocol {

struct ConnectionLimits {
  // Two messages at the frame limit: more than any complete message and its overhead.
  int64_t per_connection = 2 * kMaxMessageBytes;
  int64_t total = 16 * kMaxMessageBytes;  // all connections together
};

class ConnectionWatch {
 public:
  // Call before `router` binds. `curve`: the router is a CURVE server (refusals read
  // differently). Refusals and dropped connections go to `log`.
  ConnectionWatch(zmq::context_t& context, zmq::socket_t& router, bool curve,
                  ConnectionLimits limits, RefusalLog::Log log);

  // A complete message came over the connection `fd` (Envelope::source_fd; -1: unknown). It may
  // be called from another thread than check(): each holds the watch's lock for one system call
  // at a time.
  void delivered(int fd);
  // Reads the monitor's events, then drops the connections over the limits. Call often: the
  // master's transport calls it every 5 ms from a thread of its own (master/transport.h).
  void check();

  // The bytes a connection received since its last complete message; -1 when it is not a TCP
  // connection that the watch knows.
  int64_t unfinished_bytes(int fd) const;

 private:
  struct Connection {
    std::string endpoint;
    uint64_t baseline = 0;  // bytes received up to its last complete message
  };
  void drop(int fd, int64_t unfinished, const char* why);

  SocketMonitor monitor_;
  bool curve_;
  ConnectionLimits limits_;
  RefusalLog refuse_;
  RefusalLog::Log log_;
  mutable std::mutex mutex_;               // guards connections_
  std::map<int, Connection> connections_;  // by file descriptor
};

}  // namespace hippo::protocol
