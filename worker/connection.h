// The worker's link to its master: one ZeroMQ DEALER socket, a CURVE client that obeys only a
// master that proves the key it knows (given, or the operator's local key), unless started with
// --insecure. Its routing identity is random (socket.h): no other peer can claim it, and ZeroMQ
// keeps it when it reconnects by itself. ZeroMQ gives a connection up for good after a protocol
// error (a frame over the size limit) and sends fail from then on: the connection is then broken,
// and reconnect() makes a new socket (and a new identity: the worker says hello again).
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <zmq.hpp>

#include "protocol/auth.h"
#include "protocol/message.h"
#include "worker/options.h"

namespace hippo::worker {

class Connection {
 public:
  explicit Connection(const Options& options);

  // Sends without waiting; a send that ZeroMQ refuses marks the connection broken.
  void send(const protocol::json& message);
  // The next message from the master within timeout_ms, parsed (protocol/wire.h: its version and
  // type checked, its fields not yet); nullopt when none came. One that does not parse is logged,
  // dropped, and also gives nullopt.
  std::optional<protocol::json> receive(int timeout_ms);
  bool broken() const { return broken_; }
  // A new socket to the same master (the master must be told hello again).
  void reconnect();
  // Gives the messages still queued up to `bound` to leave when the connection closes (at exit:
  // a job's last report), instead of dropping them (protocol/socket.h: no linger by default).
  void linger(std::chrono::milliseconds bound);
  // Why the master refused our handshake, if it did (protocol/auth.h's HandshakeWatch).
  std::optional<std::string> handshake_failure() { return handshakes_.failure(0); }

 private:
  void connect();

  const Options& options_;
  zmq::context_t context_;
  zmq::socket_t socket_;
  protocol::HandshakeWatch handshakes_;
  bool broken_ = false;
};

}  // namespace hippo::worker
