#include "master/transport.h"

#include <chrono>

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
  // Every connection takes a descriptor: as many as the system lets this process have.
  spdlog::debug("open files: at most {}", protocol::raise_open_file_limit());
  socket_.bind(bind);
  watcher_ = std::jthread([this](std::stop_token stop) {
    while (!stop.stop_requested()) {
      watch_.check();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
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

}  // namespace hippo::master
