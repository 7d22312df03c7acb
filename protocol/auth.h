// CURVE authentication of hippo's sockets (ZeroMQ's CurveZMQ: each side proves that it holds a key
// pair, and the traffic is encrypted).
//
// Keys are Z85 text of 40 characters, one line in each of the files that `hippo keygen NAME`
// writes: NAME.key (the secret key, mode 0600) and NAME.pub (the public key).
//
// A master started with --auth is a CURVE server. Its ZAP handler (ZeroMQ's "may this peer in?"
// protocol, served on inproc://zeromq.zap.01 in the master's context) runs on a thread of its own
// and admits a peer only when the peer's public key is in one of the *.pub files of the authorized
// directory, which it reads again at every handshake: a file added or removed counts from the next
// connection on. ZeroMQ drops a refused peer before the ROUTER sees any message of it.
//
// Workers and clients are CURVE clients: they know the master's public key and their own pair. A
// HandshakeWatch tells them when a handshake failed for good (key refused, one side without CURVE,
// a wrong master key), so that they stop with the likely cause instead of waiting forever.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>
#include <zmq.hpp>

namespace hippo::protocol {

// A key file that cannot be read, parsed or written, or a handshake that the master refused.
struct AuthError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct KeyPair {
  std::string public_key;  // Z85, 40 characters
  std::string secret_key;  // Z85, 40 characters
};

KeyPair generate_key_pair();
// Writes NAME.key (mode 0600) and NAME.pub. Refuses when either exists, and then writes neither.
void write_key_pair(const std::string& name, const KeyPair& keys);
// A .pub file's key.
std::string read_public_key(const std::string& path);
// A .key file's key, with its public half derived from it. Warns on stderr when the file can be
// read by other users.
KeyPair read_secret_key(const std::string& path);

// What a worker or a client needs to reach a master that runs with --auth. Empty: no CURVE.
struct ClientKeys {
  std::string master_public_key;
  KeyPair own;
  bool enabled() const { return !master_public_key.empty(); }
};
// From the files of --master-key and --key: both, or neither (empty keys). `master_option` and
// `key_option` name the options in errors (the files may come from the environment).
ClientKeys load_client_keys(const std::string& master_key_file, const std::string& key_file,
                            const std::string& master_option, const std::string& key_option);
// Makes `socket` a CURVE client of the master (nothing when keys are empty). Call before connect.
void secure_client(zmq::socket_t& socket, const ClientKeys& keys);

// The handshakes of one client socket, as its ZeroMQ monitor reports them.
class HandshakeWatch {
 public:
  // Watches `socket` from now on: create it before connect. `curve`: the socket is a CURVE client
  // (the likely causes differ).
  HandshakeWatch(zmq::context_t& context, zmq::socket_t& socket, bool curve);
  // Reads the events that came (waiting up to timeout_ms for the first one) and returns the likely
  // cause when a handshake failed for good: the master refused our key, one side uses CURVE and
  // the other does not, or three handshakes in a row broke off without a reason (a wrong master
  // key, or a mismatch of mechanisms seen from the side that lost the race). nullopt otherwise.
  std::optional<std::string> failure(int timeout_ms);
  // The monitor's socket, to poll together with the watched one.
  zmq::socket_t& events() { return monitor_; }

 private:
  zmq::socket_t monitor_;
  bool curve_;
  int silent_failures_ = 0;  // handshakes in a row that broke off without a reason
};

struct ServerKeys {
  KeyPair own;
  std::string authorized_dir;  // its *.pub files are the keys of the admitted peers
};
// The keys of the *.pub files in `dir`, as (file name without .pub, key); AuthError when `dir` is
// no directory or one of its .pub files holds no key.
std::vector<std::pair<std::string, std::string>> read_authorized_keys(const std::string& dir);

// Makes a ROUTER a CURVE server and answers its ZAP requests until destroyed.
class CurveServer {
 public:
  using Log = std::function<void(const std::string&)>;
  // Call before `router` binds. Each refusal is passed to `log` (from the handler's thread) with
  // the peer's address.
  CurveServer(zmq::context_t& context, zmq::socket_t& router, const ServerKeys& keys, Log log);
  ~CurveServer();
  CurveServer(const CurveServer&) = delete;
  CurveServer& operator=(const CurveServer&) = delete;

 private:
  void serve();
  // One ZAP request: [version, request id, domain, address, identity, mechanism, key].
  void answer(std::vector<zmq::message_t>& request);
  // Logs a refusal. The same refusal again within 10 s (a peer that keeps reconnecting) is
  // counted instead, and the count logged before the next line.
  void refuse(const std::string& line);

  std::string authorized_dir_;
  Log log_;
  zmq::socket_t zap_;                 // REP on inproc://zeromq.zap.01
  zmq::socket_t monitor_;             // the ROUTER's handshake failures (peers without CURVE)
  zmq::socket_t stop_in_, stop_out_;  // a PAIR: the destructor tells the thread to end
  std::string last_refusal_;
  std::chrono::steady_clock::time_point last_logged_;
  int repeats_ = 0;
  std::thread thread_;
};

}  // namespace hippo::protocol
