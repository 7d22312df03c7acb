#include "worker/connection.h"

#include "protocol/log.h"
#include "protocol/socket.h"

namespace hippo::worker {

Connection::Connection(const Options& options)
    : options_(options),
      socket_(context_, zmq::socket_type::dealer),
      handshakes_(context_, socket_, options.keys.source) {
  connect();
}

// Call with a fresh socket_ and handshakes_.
void Connection::connect() {
  protocol::configure_dealer(socket_);
  protocol::secure_client(socket_, options_.keys);
  socket_.set(zmq::sockopt::routing_id, protocol::random_routing_id());
  socket_.connect(options_.master);
}

void Connection::reconnect() {
  spdlog::warn("the connection to the master broke off; connecting again");
  broken_ = false;
  // The old watch ends before the old socket closes (protocol/monitor.h).
  zmq::socket_t fresh(context_, zmq::socket_type::dealer);
  handshakes_ = protocol::HandshakeWatch(context_, fresh, options_.keys.source);
  socket_ = std::move(fresh);
  connect();
}

void Connection::linger(std::chrono::milliseconds bound) {
  socket_.set(zmq::sockopt::linger, static_cast<int>(bound.count()));
}

void Connection::send(const protocol::json& message) {
  if (!protocol::dealer_send(socket_, message)) broken_ = true;
}

std::optional<protocol::json> Connection::receive(int timeout_ms) {
  std::optional<std::string> body = protocol::dealer_receive(socket_, timeout_ms);
  if (!body) return std::nullopt;
  try {
    return protocol::parse(*body);
  } catch (const protocol::ProtocolError& e) {
    spdlog::warn("refused a message: {}", e.what());
    return std::nullopt;
  }
}

}  // namespace hippo::worker
