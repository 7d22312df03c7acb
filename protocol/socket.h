// Framing of protocol messages on ZeroMQ sockets. The master binds one ROUTER; workers connect
// DEALERs and clients connect REQs. Every body travels after an empty delimiter frame, so the
// ROUTER sees [identity, "", body] from both kinds of peers. With CURVE, every message also
// carries the identity its connection proved (trust.h's user id, set by the master's ZAP handler).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <zmq.hpp>

#include "protocol/auth.h"
#include "protocol/wire.h"

namespace hippo::protocol {

// Sets the options every hippo socket has: no lingering on close, frames over kMaxMessageBytes
// refused by ZeroMQ itself.
void configure(zmq::socket_t& socket);
// The master's ROUTER besides configure(): a routing identity that is in use is never handed over
// to another connection, and ZMTP heartbeats drop a connection whose peer went silent (so that a
// worker reconnecting after a network failure gets its identity back within seconds).
void configure_router(zmq::socket_t& router);
// A worker's DEALER besides configure(): ZMTP heartbeats, so that a connection to a master that
// went silent (a network cut off, a host gone) is dropped and made anew within seconds.
void configure_dealer(zmq::socket_t& dealer);
// A worker's routing identity: 16 random bytes (never a guessable name, so that no other peer can
// claim it while the worker reconnects).
std::string random_routing_id();

struct Envelope {
  std::string peer;  // ROUTER identity of the sender
  std::string body;
  std::string user;    // the ZAP user id of its connection ("" without authentication)
  int source_fd = -1;  // the file descriptor of its connection (connection_watch.h), -1 unknown
};

// ROUTER side. Receives one message without waiting longer than timeout_ms (-1: forever);
// nullopt when none came. Malformed envelopes (wrong number of frames, no delimiter) are
// consumed and returned as a body that parse() will refuse (with the sender's user id all the
// same).
std::optional<Envelope> router_receive(zmq::socket_t& router, int timeout_ms);
void router_send(zmq::socket_t& router, const std::string& peer, const json& message);
// The same with the message serialized already.
void router_send_body(zmq::socket_t& router, const std::string& peer, const std::string& body);

// DEALER side (workers).
std::optional<std::string> dealer_receive(zmq::socket_t& dealer, int timeout_ms);
// Sends without waiting. False when ZeroMQ did not take the whole message: it has no connection to
// queue on (after a protocol error, e.g. a frame over kMaxMessageBytes or a refused handshake, it
// gives a connection up for good) or the queue is full. While it reconnects on its own, messages
// are queued and this returns true.
bool dealer_send(zmq::socket_t& dealer, const json& message);

// REQ side (clients): one request, one reply, or ProtocolError after timeout_ms. With keys, the
// socket is a CURVE client; a handshake the master refuses (or a master that wants CURVE when no
// keys are given) throws AuthError naming the likely cause as soon as it happens. `gone`, when
// given, is asked every 100 ms while the reply is awaited: true (the master's process has exited)
// ends the wait with ProtocolError at once.
json request(zmq::context_t& context, const std::string& address, const json& message,
             int timeout_ms, const ClientKeys& keys = {},
             const std::function<bool()>& gone = nullptr);

}  // namespace hippo::protocol
