#include "protocol/socket.h"

#include <cerrno>
#include <vector>

namespace hippo::protocol {
namespace {

bool wait_readable(zmq::socket_t& socket, int timeout_ms) {
  zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
  try {
    return zmq::poll(&item, 1, std::chrono::milliseconds(timeout_ms)) > 0;
  } catch (const zmq::error_t& e) {
    if (e.num() == EINTR) return false;  // a signal: the caller's loop checks its flag
    throw;
  }
}

// Reads every frame of the next message (never leaves a partial message in the socket).
std::vector<zmq::message_t> receive_frames(zmq::socket_t& socket) {
  std::vector<zmq::message_t> frames;
  do {
    zmq::message_t frame;
    if (!socket.recv(frame, zmq::recv_flags::none)) break;
    frames.push_back(std::move(frame));
  } while (frames.back().more());
  return frames;
}

}  // namespace

void configure(zmq::socket_t& socket) {
  socket.set(zmq::sockopt::linger, 0);
  socket.set(zmq::sockopt::maxmsgsize, kMaxMessageBytes);
}

std::optional<Envelope> router_receive(zmq::socket_t& router, int timeout_ms) {
  if (!wait_readable(router, timeout_ms)) return std::nullopt;
  std::vector<zmq::message_t> frames = receive_frames(router);
  Envelope e;
  if (!frames.empty()) e.peer = frames[0].to_string();
  if (frames.size() == 3 && frames[1].size() == 0) e.body = frames[2].to_string();
  return e;
}

void router_send(zmq::socket_t& router, const std::string& peer, const json& message) {
  std::string body = serialize(message);
  router.send(zmq::buffer(peer), zmq::send_flags::sndmore);
  router.send(zmq::message_t(), zmq::send_flags::sndmore);
  router.send(zmq::buffer(body), zmq::send_flags::none);
}

std::optional<std::string> dealer_receive(zmq::socket_t& dealer, int timeout_ms) {
  if (!wait_readable(dealer, timeout_ms)) return std::nullopt;
  std::vector<zmq::message_t> frames = receive_frames(dealer);
  if (frames.size() == 2 && frames[0].size() == 0) return frames[1].to_string();
  return std::string();  // malformed: parse() refuses it
}

void dealer_send(zmq::socket_t& dealer, const json& message) {
  std::string body = serialize(message);
  dealer.send(zmq::message_t(), zmq::send_flags::sndmore);
  dealer.send(zmq::buffer(body), zmq::send_flags::none);
}

json request(zmq::context_t& context, const std::string& address, const json& message,
             int timeout_ms) {
  zmq::socket_t req(context, zmq::socket_type::req);
  configure(req);
  req.connect(address);
  std::string body = serialize(message);
  req.send(zmq::buffer(body), zmq::send_flags::none);
  if (!wait_readable(req, timeout_ms))
    throw ProtocolError("no answer from the master at " + address + " within " +
                        std::to_string(timeout_ms / 1000) + " s");
  zmq::message_t reply;
  if (!req.recv(reply, zmq::recv_flags::none))
    throw ProtocolError("no answer from the master at " + address);
  return parse(reply.to_string());
}

}  // namespace hippo::protocol
