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
// It also bounds the connections that have not spoken yet: accepted, and no complete message
// read from them (a peer that has not finished its handshake, or that connected and says
// nothing). Every one holds a file descriptor and ZeroMQ's memory until its handshake times out,
// so a flood of them would exhaust the master's descriptors (ZeroMQ then spins on accept() and
// the owner's own queries wait). Beyond `silent_per_source` from one address, or `silent_total`
// from all, the oldest of them is shut down: a hostile peer holds no slot for long, and a new
// connection that finishes its handshake at once (a worker's hello, a client's request) always
// gets through. A peer that has spoken is never counted again (it passed the handshake, with
// CURVE its key).
//
// And it logs the handshakes that fail before authentication (a peer without CURVE).
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
  // Connections that have not spoken yet: a client's burst of queries and a cluster's workers
  // reconnecting at once fit many times over.
  int silent_per_source = 64;  // from one address
  int silent_total = 256;      // in all
};

// Raises this process's limit of open files (RLIMIT_NOFILE) to its hard limit: every connection
// takes a descriptor, and the usual soft limit (1,024) is far below the hard one. Returns the
// limit now in force.
int64_t raise_open_file_limit();

class ConnectionWatch {
 public:
  // Call before `router` binds. `curve`: the router is a CURVE server (refusals read
  // differently). Refusals and dropped connections go to `log`.
  ConnectionWatch(zmq::context_t& context, zmq::socket_t& router, bool curve,
                  ConnectionLimits limits, RefusalLog::Log log);

  // A complete message came over the connection `fd` (Envelope::source_fd; -1: unknown): it has
  // spoken. It may
  // be called from another thread than check(): each holds the watch's lock for one system call
  // at a time.
  void delivered(int fd);
  // Reads the monitor's events, then drops the connections over the limits (the oldest silent
  // ones beyond their limits, then those holding too much of a message). Call often: the
  // master's transport calls it every 5 ms from a thread of its own (master/transport.h).
  void check();

  // The bytes a connection received since its last complete message; -1 when it is not a TCP
  // connection that the watch knows.
  int64_t unfinished_bytes(int fd) const;

 private:
  struct Connection {
    std::string endpoint;
    std::string source;     // the peer's address, without its port ("local" for ipc://)
    uint64_t accepted = 0;  // its place in the order of accepting
    bool spoken = false;    // a complete message came over it
    uint64_t baseline = 0;  // bytes received up to its last complete message
  };
  // Shuts the oldest silent connections down while more than the limits are silent.
  void drop_silent();
  void drop(int fd, int64_t unfinished, const char* why);

  SocketMonitor monitor_;
  bool curve_;
  ConnectionLimits limits_;
  RefusalLog refuse_;
  RefusalLog::Log log_;
  mutable std::mutex mutex_;               // guards connections_
  std::map<int, Connection> connections_;  // by file descriptor
  uint64_t accepted_ = 0;                  // connections accepted so far
};

}  // namespace hippo::protocol
