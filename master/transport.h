// Where the master's messages come from and go to. Every real run has a ZeroMQ ROUTER
// (ZmqTransport: CURVE when asked, its connections watched); `hippo simulate` has simulated
// workers in virtual time (simulator.h). The master's handlers see envelopes and bodies only, so
// both run the same master code.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <zmq.hpp>

#include "protocol/auth.h"
#include "protocol/connection_watch.h"
#include "protocol/socket.h"
#include "protocol/trust.h"

namespace hippo::master {

class Transport {
 public:
  virtual ~Transport() = default;
  // The next message, waiting at most timeout_ms for one; nullopt when none came.
  virtual std::optional<protocol::Envelope> receive(int timeout_ms) = 0;
  virtual void send(const std::string& peer, const std::string& body) = 0;
  // The identity that the message's connection proved (protocol/trust.h).
  virtual protocol::PeerIdentity identity_of(const protocol::Envelope& envelope) const = 0;
};

// The ROUTER socket bound at `bind`: with `auth`, a CURVE server that admits only its keys;
// without (--insecure), anyone who reaches it, with every role. Connections that hold too much of
// an unfinished message are dropped (protocol/connection_watch.h) by a thread of their own that
// looks every 5 ms: such a message wakes no poll (ZeroMQ delivers whole messages) and grows at
// loopback speed (1 to 2 GB/s) whatever the master is doing (a commit's fsync, a long wait).
// Its constructor raises the process's limit of open files to the hard limit (a descriptor per
// connection), and the watch bounds the connections that have not sent a message yet.
class ZmqTransport : public Transport {
 public:
  ZmqTransport(const std::string& bind, const std::optional<protocol::ServerKeys>& auth,
               const protocol::ConnectionLimits& limits);
  ~ZmqTransport() override;

  std::optional<protocol::Envelope> receive(int timeout_ms) override;
  void send(const std::string& peer, const std::string& body) override;
  protocol::PeerIdentity identity_of(const protocol::Envelope& envelope) const override;

 private:
  zmq::context_t context_;
  zmq::socket_t socket_;
  protocol::ConnectionWatch watch_;               // check()ed by watcher_, told of deliveries here
  std::unique_ptr<protocol::CurveServer> curve_;  // with auth
  std::jthread watcher_;  // last: stopped and joined before the rest is destroyed
};

}  // namespace hippo::master
