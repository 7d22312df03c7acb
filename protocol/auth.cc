#include "protocol/auth.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace hippo::protocol {
namespace {

namespace fs = std::filesystem;

constexpr size_t kKeyLength = 40;  // Z85 text of a 32-byte key
// The events a HandshakeWatch reads; nothing else is queued in its monitor.
constexpr int kHandshakeEvents =
    ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
    ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;
constexpr int kSilentFailuresForGood = 3;

bool is_key_text(const std::string& text) {
  uint8_t bytes[32];
  return text.size() == kKeyLength && zmq_z85_decode(bytes, text.c_str()) != nullptr;
}

// The key in a key file: one line of 40 Z85 characters.
std::string read_key_file(const std::string& path, const char* what) {
  std::ifstream in(path);
  if (!in) throw AuthError(path + ": cannot read: " + std::strerror(errno));
  char text[2 * kKeyLength];  // a longer file is no key file (and /dev/zero is read no further)
  in.read(text, sizeof text);
  std::string key(text, static_cast<size_t>(in.gcount()));
  while (!key.empty() && (key.back() == '\n' || key.back() == '\r' || key.back() == ' '))
    key.pop_back();
  if (!is_key_text(key))
    throw AuthError(path + ": not a " + what +
                    " key file (one line of 40 Z85 characters, as `hippo keygen` writes)");
  return key;
}

void write_new_file(const std::string& path, const std::string& text, mode_t mode) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) throw AuthError(path + ": cannot create: " + std::strerror(errno));
  // The umask may only narrow the mode; fchmod makes it exactly `mode` (0600 for a secret).
  bool ok = ::fchmod(fd, mode) == 0 &&
            ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
            ::fsync(fd) == 0;
  int err = errno;
  ::close(fd);
  if (!ok) {
    ::unlink(path.c_str());
    throw AuthError(path + ": cannot write: " + std::strerror(err));
  }
}

std::vector<zmq::message_t> receive_all(zmq::socket_t& socket) {
  std::vector<zmq::message_t> frames;
  do {
    zmq::message_t frame;
    if (!socket.recv(frame, zmq::recv_flags::dontwait)) break;
    frames.push_back(std::move(frame));
  } while (frames.back().more());
  return frames;
}

// A monitor event: [u16 event, u32 value][endpoint].
struct Event {
  uint16_t event = 0;
  uint32_t value = 0;
  std::string endpoint;
};
std::optional<Event> read_event(zmq::socket_t& monitor) {
  std::vector<zmq::message_t> frames = receive_all(monitor);
  if (frames.size() < 2 || frames[0].size() < 6) return std::nullopt;
  Event e;
  std::memcpy(&e.event, frames[0].data(), 2);
  std::memcpy(&e.value, static_cast<const char*>(frames[0].data()) + 2, 4);
  e.endpoint = frames[1].to_string();
  return e;
}

std::string hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%x", v);
  return buf;
}

// A fresh inproc address: a closed socket's address is released only later, by ZeroMQ's reaper.
std::string unique_inproc(const char* what) {
  static std::atomic<uint64_t> next{0};
  return std::string("inproc://hippo-") + what + "-" + std::to_string(next++);
}

bool poll_in(zmq::socket_t& socket, int timeout_ms) {
  zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
  try {
    return zmq::poll(&item, 1, std::chrono::milliseconds(timeout_ms)) > 0;
  } catch (const zmq::error_t& e) {
    if (e.num() == EINTR) return false;
    throw;
  }
}

}  // namespace

KeyPair generate_key_pair() {
  char public_key[kKeyLength + 1], secret_key[kKeyLength + 1];
  if (zmq_curve_keypair(public_key, secret_key) != 0)
    throw AuthError("cannot make a CURVE key pair: this libzmq has no CURVE support");
  return {public_key, secret_key};
}

void write_key_pair(const std::string& name, const KeyPair& keys) {
  const std::string secret = name + ".key", pub = name + ".pub";
  for (const std::string& path : {secret, pub}) {
    std::error_code ec;
    if (fs::exists(fs::symlink_status(path, ec)))
      throw AuthError(path + ": exists already (a key is never overwritten)");
  }
  write_new_file(secret, keys.secret_key + "\n", 0600);
  try {
    write_new_file(pub, keys.public_key + "\n", 0644);
  } catch (...) {
    ::unlink(secret.c_str());
    throw;
  }
}

std::string read_public_key(const std::string& path) {
  if (path.ends_with(".key"))
    throw AuthError(path + ": this is a secret key file; give the public one (.pub)");
  return read_key_file(path, "public");
}

KeyPair read_secret_key(const std::string& path) {
  if (path.ends_with(".pub"))
    throw AuthError(path + ": this is a public key file; give the secret one (.key)");
  KeyPair keys;
  keys.secret_key = read_key_file(path, "secret");
  char public_key[kKeyLength + 1];
  if (zmq_curve_public(public_key, keys.secret_key.c_str()) != 0)
    throw AuthError(path + ": cannot derive the public key: this libzmq has no CURVE support");
  keys.public_key = public_key;
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && (st.st_mode & 077) != 0)
    std::fprintf(stderr, "warning: %s can be read by other users (chmod 600 it)\n", path.c_str());
  return keys;
}

ClientKeys load_client_keys(const std::string& master_key_file, const std::string& key_file,
                            const std::string& master_option, const std::string& key_option) {
  if (master_key_file.empty() != key_file.empty())
    throw AuthError(master_key_file.empty()
                        ? key_option + " needs " + master_option + " (the master's public key)"
                        : master_option + " needs " + key_option + " (your own secret key)");
  ClientKeys keys;
  if (master_key_file.empty()) return keys;
  keys.master_public_key = read_public_key(master_key_file);
  keys.own = read_secret_key(key_file);
  return keys;
}

void secure_client(zmq::socket_t& socket, const ClientKeys& keys) {
  if (!keys.enabled()) return;
  socket.set(zmq::sockopt::curve_serverkey, keys.master_public_key);
  socket.set(zmq::sockopt::curve_publickey, keys.own.public_key);
  socket.set(zmq::sockopt::curve_secretkey, keys.own.secret_key);
}

HandshakeWatch::HandshakeWatch(zmq::context_t& context, zmq::socket_t& socket, bool curve)
    : monitor_(context, zmq::socket_type::pair), curve_(curve) {
  std::string address = unique_inproc("handshakes");
  if (zmq_socket_monitor(socket.handle(), address.c_str(), kHandshakeEvents) != 0)
    throw zmq::error_t();
  monitor_.set(zmq::sockopt::linger, 0);
  monitor_.connect(address);
}

std::optional<std::string> HandshakeWatch::failure(int timeout_ms) {
  for (int wait = timeout_ms; poll_in(monitor_, wait); wait = 0) {
    std::optional<Event> e = read_event(monitor_);
    if (!e) continue;
    switch (e->event) {
      case ZMQ_EVENT_HANDSHAKE_SUCCEEDED:
        silent_failures_ = 0;
        break;
      case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
        return "the master refused our key (status " + std::to_string(e->value) +
               "): its public key (.pub) must be in the master's --authorized directory";
      case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
        if (e->value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH)
          return curve_ ? "the master does not use CURVE authentication (it runs without --auth): "
                          "drop --master-key and --key ($HIPPO_MASTER_KEY, $HIPPO_KEY)"
                        : "the master requires CURVE authentication (it runs with --auth): give "
                          "--master-key and --key (or set $HIPPO_MASTER_KEY and $HIPPO_KEY)";
        return "the handshake with the master failed (ZMTP protocol error " + hex(e->value) + ")";
      case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL:
        // The master closed the connection mid-handshake: under load this is also how a
        // mismatch of mechanisms can show.
        if (++silent_failures_ >= kSilentFailuresForGood)
          return "the master broke off the handshake " + std::to_string(kSilentFailuresForGood) +
                 " times: " +
                 (curve_ ? "either it runs without --auth (then drop --master-key and --key), or "
                           "--master-key is not its public key"
                         : "it probably requires CURVE authentication (it runs with --auth): give "
                           "--master-key and --key (or set $HIPPO_MASTER_KEY and $HIPPO_KEY)");
        break;
    }
  }
  return std::nullopt;
}

std::vector<std::pair<std::string, std::string>> read_authorized_keys(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw AuthError(dir + ": not a directory (of the *.pub files of the admitted peers)");
  std::vector<std::pair<std::string, std::string>> keys;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().extension() != ".pub") continue;
    keys.emplace_back(entry.path().stem().string(), read_public_key(entry.path().string()));
  }
  if (ec) throw AuthError(dir + ": cannot list: " + ec.message());
  std::sort(keys.begin(), keys.end());
  return keys;
}

CurveServer::CurveServer(zmq::context_t& context, zmq::socket_t& router, const ServerKeys& keys,
                         Log log)
    : authorized_dir_(keys.authorized_dir),
      log_(std::move(log)),
      zap_(context, zmq::socket_type::rep),
      monitor_(context, zmq::socket_type::pair),
      stop_in_(context, zmq::socket_type::pair),
      stop_out_(context, zmq::socket_type::pair) {
  for (zmq::socket_t* s : {&zap_, &monitor_, &stop_in_, &stop_out_})
    s->set(zmq::sockopt::linger, 0);
  // Bound before the ROUTER is: a CURVE server with no ZAP handler would admit every key.
  zap_.bind("inproc://zeromq.zap.01");
  std::string stop = unique_inproc("curve-stop");
  stop_in_.bind(stop);
  stop_out_.connect(stop);
  std::string monitor = unique_inproc("curve-monitor");
  if (zmq_socket_monitor(router.handle(), monitor.c_str(), ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) !=
      0)
    throw zmq::error_t();
  monitor_.connect(monitor);
  router.set(zmq::sockopt::curve_server, 1);
  router.set(zmq::sockopt::curve_secretkey, keys.own.secret_key);
  thread_ = std::thread(&CurveServer::serve, this);
}

CurveServer::~CurveServer() {
  stop_out_.send(zmq::message_t(), zmq::send_flags::none);
  thread_.join();
}

void CurveServer::serve() {
  zmq::pollitem_t items[] = {{zap_.handle(), 0, ZMQ_POLLIN, 0},
                             {monitor_.handle(), 0, ZMQ_POLLIN, 0},
                             {stop_in_.handle(), 0, ZMQ_POLLIN, 0}};
  while (true) {
    try {
      zmq::poll(items, 3, std::chrono::milliseconds(-1));
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;
      log_(std::string("authentication stopped: ") + e.what());
      return;  // no answers any more: handshakes wait, nobody gets in
    }
    if (items[2].revents & ZMQ_POLLIN) return;
    if (items[0].revents & ZMQ_POLLIN) {
      std::vector<zmq::message_t> request = receive_all(zap_);
      answer(request);
    }
    if (items[1].revents & ZMQ_POLLIN) {
      std::optional<Event> e = read_event(monitor_);
      if (e && e->value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH)
        refuse("refused a peer on " + e->endpoint +
               ": it does not use CURVE (a worker or client without --master-key and --key)");
      else if (e)
        refuse("refused a peer on " + e->endpoint + ": its CURVE handshake failed (ZMTP error " +
               hex(e->value) + "; was it given this master's public key?)");
    }
  }
}

void CurveServer::refuse(const std::string& line) {
  auto now = std::chrono::steady_clock::now();
  if (line == last_refusal_ && now - last_logged_ < std::chrono::seconds(10)) {
    ++repeats_;
    return;
  }
  if (repeats_ > 0) log_("(the refusal before came " + std::to_string(repeats_) + " more times)");
  log_(line);
  last_refusal_ = line;
  last_logged_ = now;
  repeats_ = 0;
}

void CurveServer::answer(std::vector<zmq::message_t>& request) {
  // ZAP 1.0 (https://rfc.zeromq.org/spec/27/): the reply is [version, request id, status code,
  // status text, user id, metadata].
  std::string status = "400", text = "key not authorized", user;
  zmq::message_t request_id;
  if (request.size() > 1) request_id.copy(request[1]);
  if (request.size() < 7 || request[0].to_string() != "1.0") {
    refuse("refused a malformed ZAP request");
  } else {
    std::string address = request[3].to_string();
    if (address.empty()) address = "a local (ipc) peer";
    std::string key;
    if (request[5].to_string() == "CURVE" && request[6].size() == 32) {
      char z85[kKeyLength + 1];
      zmq_z85_encode(z85, request[6].data<uint8_t>(), 32);
      key = z85;
    }
    try {
      for (const auto& [name, authorized] : read_authorized_keys(authorized_dir_))
        if (!key.empty() && authorized == key) {
          status = "200";
          text = "OK";
          user = name;
          break;
        }
      if (status != "200")
        refuse("refused a connection from " + address + ": its key " + key + " is not in " +
               authorized_dir_);
    } catch (const AuthError& e) {
      status = "500";
      text = "authorized keys unreadable";
      refuse("refused a connection from " + address + ": " + e.what());
    }
  }
  zap_.send(zmq::str_buffer("1.0"), zmq::send_flags::sndmore);
  zap_.send(request_id, zmq::send_flags::sndmore);
  zap_.send(zmq::buffer(status), zmq::send_flags::sndmore);
  zap_.send(zmq::buffer(text), zmq::send_flags::sndmore);
  zap_.send(zmq::buffer(user), zmq::send_flags::sndmore);
  zap_.send(zmq::message_t(), zmq::send_flags::none);
}

}  // namespace hippo::protocol
