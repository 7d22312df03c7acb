// CURVE authentication of hippo's sockets (ZeroMQ's CurveZMQ: each side proves that it holds a key
// pair, and the traffic is encrypted). Who may do what once admitted is trust.h's.
//
// Keys are Z85 text of 40 characters, one line in each of the files that `hippo keygen NAME`
// writes: NAME.key (the secret key, mode 0600) and NAME.pub (the public key).
//
// Every master is a CURVE server unless started with --insecure:
//   --auth        admits the keys of its --authorized directory, each with the role of the
//                 subdirectory it is in: workers/, clients/, admins/ (read again at every
//                 handshake: a file added or removed counts from the next connection on);
//   without it    admits only the operator's own local key (local_key_pair: made on first use in
//                 $HIPPO_HOME, default ~/.hippo, a 0700 directory), which the workers and clients
//                 of the same OS user find by themselves; other users cannot read it;
//   `hippo run`   admits the key it made for its own workers, and the operator's local key as a
//                 client for `hippo enqueue` alone (master/run_record.h).
// Its ZAP handler (ZeroMQ's "may this peer in?" protocol, served on inproc://zeromq.zap.01 in the
// master's context) runs on a thread of its own and answers each admitted peer with its identity
// (trust.h's user id), which ZeroMQ attaches to every message of that connection. ZeroMQ drops a
// refused peer before the ROUTER sees any message of it.
//
// Workers and clients are CURVE clients: they know the master's public key (given, or the local
// one) and their own pair, so a process that cannot prove the master's key is never obeyed. A
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

#include "protocol/monitor.h"
#include "protocol/trust.h"

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
// Whether `text` is a key as a .pub file holds it: 40 characters of Z85.
bool is_key_text(const std::string& text);
// A .key file's key, with its public half derived from it. Warns on stderr when the file can be
// read by other users.
KeyPair read_secret_key(const std::string& path);

// The operator's own key pair: $HIPPO_HOME/local.key (default ~/.hippo), made on first use, the
// directory with mode 0700 and the file 0600, both owned by this user (anything else is refused:
// another user could have planted them). Race-free between processes that make it at once.
KeyPair local_key_pair();
// The directory local_key_pair uses.
std::string local_key_dir();

// What a worker or a client needs to reach its master.
struct ClientKeys {
  enum class Source {
    kNone,   // --insecure: no CURVE (for a master started with --insecure)
    kGiven,  // --master-key and --key (a master with --auth)
    kLocal,  // the operator's local key (a master of the same user without --auth)
  };
  Source source = Source::kNone;
  std::string master_public_key;
  KeyPair own;
  bool enabled() const { return source != Source::kNone; }
};
// From the files of --master-key and --key (both, or neither), else none with `insecure`, else
// the local key pair. `master_option` and `key_option` name the options in errors (the files may
// come from the environment).
ClientKeys resolve_client_keys(const std::string& master_key_file, const std::string& key_file,
                               bool insecure, const std::string& master_option,
                               const std::string& key_option);
// Makes `socket` a CURVE client of the master (nothing when keys are empty). Call before connect.
void secure_client(zmq::socket_t& socket, const ClientKeys& keys);

// The handshakes of one client socket, as its ZeroMQ monitor reports them.
class HandshakeWatch {
 public:
  // Watches `socket` from now on: create it before connect. `keys`: where the socket's keys came
  // from (the likely causes differ).
  HandshakeWatch(zmq::context_t& context, zmq::socket_t& socket, ClientKeys::Source keys);
  // Reads the events that came (waiting up to timeout_ms for the first one) and returns the likely
  // cause when a handshake failed for good: the master refused our key, one side uses CURVE and
  // the other does not, or three handshakes in a row broke off without a reason (a wrong master
  // key, or a mismatch of mechanisms seen from the side that lost the race). nullopt otherwise.
  std::optional<std::string> failure(int timeout_ms);
  // The monitor's socket, to poll together with the watched one.
  zmq::socket_t& events() { return monitor_.events(); }

 private:
  SocketMonitor monitor_;
  ClientKeys::Source keys_;
  int silent_failures_ = 0;  // handshakes in a row that broke off without a reason
};

// The subdirectories of an --authorized directory, each giving its keys one role.
inline constexpr const char* kWorkersDir = "workers";
inline constexpr const char* kClientsDir = "clients";
inline constexpr const char* kAdminsDir = "admins";

struct ServerKeys {
  KeyPair own;
  std::string authorized_dir;          // --auth: its workers/, clients/ and admins/ *.pub files
  std::vector<PeerIdentity> admitted;  // without an authorized_dir: exactly these keys
};
// The keys of the *.pub files in dir's workers/, clients/ and admins/, each with the roles of the
// subdirectories it is in (name: the file name without .pub); AuthError when `dir` is no
// directory, holds a .pub file of its own (a key without a role), or a .pub file holds no key.
std::vector<PeerIdentity> read_authorized_keys(const std::string& dir);

// Logs a refusal; the same refusal again within 10 s (a peer that keeps reconnecting) is counted
// instead, and the count logged before the next line.
class RefusalLog {
 public:
  using Log = std::function<void(const std::string&)>;
  explicit RefusalLog(Log log) : log_(std::move(log)) {}
  void operator()(const std::string& line);

 private:
  Log log_;
  std::string last_;
  std::chrono::steady_clock::time_point last_logged_;
  int repeats_ = 0;
};

// Makes a ROUTER a CURVE server and answers its ZAP requests until destroyed. (Handshakes that
// fail before ZAP, e.g. a peer without CURVE, are the ROUTER's monitor's: connection_watch.h.)
class CurveServer {
 public:
  using Log = RefusalLog::Log;
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
  // The admitted peer whose key this is, or nullopt; AuthError when the directory is unreadable.
  std::optional<PeerIdentity> admitted(const std::string& key) const;

  std::string authorized_dir_;
  std::vector<PeerIdentity> admitted_;
  RefusalLog refuse_;
  zmq::socket_t zap_;                 // REP on inproc://zeromq.zap.01
  zmq::socket_t stop_in_, stop_out_;  // a PAIR: the destructor tells the thread to end
  std::thread thread_;
};

}  // namespace hippo::protocol
