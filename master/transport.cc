#include "master/transport.h"

#include "protocol/log.h"

namespace hippo::master {

ZmqTransport::ZmqTransport(const std::string& bind, const std::optional<protocol::ServerKeys>& auth,
                           const protocol::ConnectionLimits& limits)
    : socket_(context_, zmq::socket_type::router),
      watch_(context_, socket_, auth.has_value(), limits,
             [](const std::string& line) { spdlog::warn("{}", line); }) {
  protocol::configure_router(socket_);
  if (auth)
    curve_ = std::make_unique<protocol::CurveServer>(
        context_, socket_, *auth, [](const std::string& line) { spdlog::warn("{}", line); });
  socket_.bind(bind);
}

ZmqTransport::~ZmqTransport() = default;

std::optional<protocol::Envelope> ZmqTransport::receive(int timeout_ms) {
  std::optional<protocol::Envelope> envelope = protocol::router_receive(socket_, timeout_ms);
  if (envelope) watch_.delivered(envelope->source_fd);
  return envelope;
}

void ZmqTransport::send(const std::string& peer, const std::string& body) {
  protocol::router_send_body(socket_, peer, body);
}

protocol::PeerIdentity ZmqTransport::identity_of(const protocol::Envelope& envelope) const {
  // With CURVE every admitted connection has a user id: a message without one gets no role.
  if (curve_ && envelope.user.empty()) return {};
  return protocol::from_user_id(envelope.user);
}

void ZmqTransport::check() {
  watch_.check();
}

}  // namespace hippo::master
