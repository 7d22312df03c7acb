#include "protocol/socket.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <vector>

#include "protocol/monitor.h"
#include "protocol/random_token.h"

namespace hippo::protocol {
namespace {

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

// ZMTP heartbeats: a connection whose peer went silent for 10 s is dropped (and a DEALER connects
// again), where TCP alone would wait for its retransmissions to give up (minutes).
void set_heartbeats(zmq::socket_t& socket) {
  socket.set(zmq::sockopt::heartbeat_ivl, 2000);
  socket.set(zmq::sockopt::heartbeat_timeout, 10000);
}

}  // namespace

void configure(zmq::socket_t& socket) {
  socket.set(zmq::sockopt::linger, 0);
  socket.set(zmq::sockopt::maxmsgsize, kMaxMessageBytes);
}

void configure_router(zmq::socket_t& router) {
  configure(router);
  router.set(zmq::sockopt::router_handover, 0);
  set_heartbeats(router);
}

void configure_dealer(zmq::socket_t& dealer) {
  configure(dealer);
  set_heartbeats(dealer);
}

std::string random_routing_id() {
  std::string id = random_bytes(16);
  // ZeroMQ reserves ids that start with 0.
  id[0] = static_cast<char>(1 + static_cast<unsigned char>(id[0]) % 255);
  return id;
}

std::optional<Envelope> router_receive(zmq::socket_t& router, int timeout_ms) {
  if (!wait_readable(router, timeout_ms)) return std::nullopt;
  std::vector<zmq::message_t> frames = receive_frames(router);
  Envelope e;
  if (!frames.empty()) e.peer = frames[0].to_string();
  if (frames.size() == 3 && frames[1].size() == 0) e.body = frames[2].to_string();
  if (!frames.empty()) {
    // Every frame after the identity came over the sender's connection and carries its
    // properties (the identity frame is the ROUTER's own).
    zmq::message_t& last = frames.back();
    if (const char* user = zmq_msg_gets(last.handle(), "User-Id")) e.user = user;
    e.source_fd = zmq_msg_get(last.handle(), ZMQ_SRCFD);
  }
  return e;
}

void router_send(zmq::socket_t& router, const std::string& peer, const json& message) {
  router_send_body(router, peer, serialize(message));
}

void router_send_body(zmq::socket_t& router, const std::string& peer, const std::string& body) {
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

bool dealer_send(zmq::socket_t& dealer, const json& message) {
  std::string body = serialize(message);
  // Neither frame may wait: ZeroMQ can give the connection up between the two (a handshake
  // refused by whoever listens at the address), and a blocking send of the second frame would
  // then wait forever for a connection that never comes back. A half-sent message dies with the
  // connection, and the caller makes a new one.
  try {
    return dealer.send(zmq::message_t(), zmq::send_flags::sndmore | zmq::send_flags::dontwait) &&
           dealer.send(zmq::buffer(body), zmq::send_flags::dontwait);
  } catch (const zmq::error_t&) {
    return false;  // EFAULT: ZeroMQ dropped the message's first frame with its connection
  }
}

json request(zmq::context_t& context, const std::string& address, const json& message,
             int timeout_ms, const ClientKeys& keys, const std::function<bool()>& gone) {
  zmq::socket_t req(context, zmq::socket_type::req);
  configure(req);
  secure_client(req, keys);
  HandshakeWatch handshakes(context, req, keys.source);
  req.connect(address);
  std::string body = serialize(message);
  req.send(zmq::buffer(body), zmq::send_flags::none);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  zmq::pollitem_t items[] = {{req.handle(), 0, ZMQ_POLLIN, 0},
                             {handshakes.events().handle(), 0, ZMQ_POLLIN, 0}};
  while (true) {
    auto left =
        std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    if (gone) left = std::min(left, std::chrono::milliseconds(100));
    try {
      zmq::poll(items, 2, left);
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw;
    }
    if (items[0].revents & ZMQ_POLLIN) {
      zmq::message_t reply;
      if (!req.recv(reply, zmq::recv_flags::none))
        throw ProtocolError("no answer from the master at " + address);
      return parse(reply.to_string());
    }
    if (std::optional<std::string> why = handshakes.failure(0))
      throw AuthError("the master at " + address + " refused this connection: " + *why);
    if (gone && gone()) throw ProtocolError("the master at " + address + " has exited");
  }
  throw ProtocolError("no answer from the master at " + address + " within " +
                      std::to_string(timeout_ms / 1000) + " s (is a master running there?)");
}

}  // namespace hippo::protocol
