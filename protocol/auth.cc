#include "protocol/auth.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
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

}  // namespace

bool is_key_text(const std::string& text) {
  uint8_t bytes[32];
  return text.size() == kKeyLength && zmq_z85_decode(bytes, text.c_str()) != nullptr;
}

namespace {

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

std::string hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%x", v);
  return buf;
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

std::string local_key_dir() {
  if (const char* home = std::getenv("HIPPO_HOME"); home && *home) return home;
  const char* user_home = std::getenv("HOME");
  if (!user_home || !*user_home)
    throw AuthError("no $HOME: set $HIPPO_HOME to a directory for this user's local key");
  return std::string(user_home) + "/.hippo";
}

KeyPair local_key_pair() {
  const std::string dir = local_key_dir(), path = dir + "/local.key";
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    throw AuthError(dir + ": cannot create: " + std::strerror(errno));
  // Only this user may have made them: a directory or key that another user could have planted
  // would make us admit, or obey, that user.
  auto check_private = [](const std::string& p, bool directory) {
    struct stat st;
    if (::lstat(p.c_str(), &st) != 0) throw AuthError(p + ": " + std::strerror(errno));
    if ((directory ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode)) || st.st_uid != ::geteuid())
      throw AuthError(p + ": not a " + (directory ? "directory" : "file") + " of this user (uid " +
                      std::to_string(::geteuid()) + "): the local key must be this user's alone");
    if ((st.st_mode & 077) != 0)
      throw AuthError(p + ": other users may " + (directory ? "enter" : "read") + " it (chmod " +
                      (directory ? "700" : "600") +
                      " it): the local key must be this user's alone");
  };
  check_private(dir, true);
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    // Written whole under a temporary name, then linked in place: two processes that make it at
    // once end up with the same key (the second link fails, and that process reads the first).
    std::string temp = dir + "/local.key.XXXXXX";
    int fd = ::mkstemp(temp.data());
    if (fd < 0) throw AuthError(dir + ": cannot write the local key: " + std::strerror(errno));
    const std::string text = generate_key_pair().secret_key + "\n";
    bool ok = ::fchmod(fd, 0600) == 0 &&
              ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
              ::fsync(fd) == 0;
    int err = errno;
    ::close(fd);
    if (ok && ::link(temp.c_str(), path.c_str()) != 0 && errno != EEXIST) {
      ok = false;
      err = errno;
    }
    ::unlink(temp.c_str());
    if (!ok) throw AuthError(path + ": cannot write: " + std::strerror(err));
  }
  check_private(path, false);
  return read_secret_key(path);
}

ClientKeys resolve_client_keys(const std::string& master_key_file, const std::string& key_file,
                               bool insecure, const std::string& master_option,
                               const std::string& key_option) {
  if (master_key_file.empty() != key_file.empty())
    throw AuthError(master_key_file.empty()
                        ? key_option + " needs " + master_option + " (the master's public key)"
                        : master_option + " needs " + key_option + " (your own secret key)");
  ClientKeys keys;
  if (!master_key_file.empty()) {
    if (insecure) throw AuthError("--insecure contradicts " + master_option + " and " + key_option);
    keys.source = ClientKeys::Source::kGiven;
    keys.master_public_key = read_public_key(master_key_file);
    keys.own = read_secret_key(key_file);
  } else if (!insecure) {
    keys.source = ClientKeys::Source::kLocal;
    keys.own = local_key_pair();
    keys.master_public_key = keys.own.public_key;
  }
  return keys;
}

void secure_client(zmq::socket_t& socket, const ClientKeys& keys) {
  if (!keys.enabled()) return;
  socket.set(zmq::sockopt::curve_serverkey, keys.master_public_key);
  socket.set(zmq::sockopt::curve_publickey, keys.own.public_key);
  socket.set(zmq::sockopt::curve_secretkey, keys.own.secret_key);
}

HandshakeWatch::HandshakeWatch(zmq::context_t& context, zmq::socket_t& socket,
                               ClientKeys::Source keys)
    : monitor_(context, socket, kHandshakeEvents), keys_(keys) {}

std::optional<std::string> HandshakeWatch::failure(int timeout_ms) {
  using Source = ClientKeys::Source;
  // The likely cause of each failure, by where our keys came from.
  const char* refused =
      keys_ == Source::kLocal
          ? "this master runs with --auth and does not admit this user's local key: give "
            "--master-key and --key (or set $HIPPO_MASTER_KEY and $HIPPO_KEY)"
          : "its public key (.pub) must be in the master's --authorized directory (workers/ for a "
            "worker, clients/ or admins/ for a client)";
  const char* no_curve =
      keys_ == Source::kNone
          ? "the master requires CURVE authentication: without --insecure, the keys are found "
            "by themselves for a master of this user (or give --master-key and --key for one "
            "with --auth)"
          : "the master runs without authentication (--insecure): connect with --insecure to "
            "accept that, or it is not the master you know";
  const char* broke_off =
      keys_ == Source::kNone ? "it probably requires CURVE authentication: drop --insecure"
      : keys_ == Source::kLocal
          ? "either it runs with --auth (then give --master-key and --key) or with --insecure "
            "(then give --insecure), or it is not this user's master (it cannot prove the local "
            "key)"
          : "either it runs without --auth, or --master-key is not its public key";
  for (int wait = timeout_ms; wait_readable(monitor_.events(), wait); wait = 0) {
    std::optional<MonitorEvent> e = next_event(monitor_.events(), 0);
    if (!e) continue;
    switch (e->event) {
      case ZMQ_EVENT_HANDSHAKE_SUCCEEDED:
        silent_failures_ = 0;
        break;
      case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
        return "the master refused our key (status " + std::to_string(e->value) + "): " + refused;
      case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
        if (e->value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH) return std::string(no_curve);
        return "the handshake with the master failed (ZMTP protocol error " + hex(e->value) + ")";
      case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL:
        // The master closed the connection mid-handshake: under load this is also how a
        // mismatch of mechanisms can show.
        if (++silent_failures_ >= kSilentFailuresForGood)
          return "the master broke off the handshake " + std::to_string(kSilentFailuresForGood) +
                 " times: " + broke_off;
        break;
    }
  }
  return std::nullopt;
}

std::vector<PeerIdentity> read_authorized_keys(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw AuthError(dir + ": not a directory (of the admitted peers' keys, in " + kWorkersDir +
                    "/, " + kClientsDir + "/ and " + kAdminsDir + "/)");
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec))
    if (entry.path().extension() == ".pub")
      throw AuthError(entry.path().string() +
                      ": a key directly in the authorized directory has no "
                      "role: move it into " +
                      kWorkersDir + "/ (a worker), " + kClientsDir + "/ (a client) or " +
                      kAdminsDir + "/ (a client that may cancel any study)");
  if (ec) throw AuthError(dir + ": cannot list: " + ec.message());
  std::vector<PeerIdentity> keys;
  const std::pair<const char*, uint32_t> kRoleDirs[] = {{kWorkersDir, kWorkerRole},
                                                        {kClientsDir, kClientRole},
                                                        {kAdminsDir, kClientRole | kAdminRole}};
  for (const auto& [sub, role] : kRoleDirs) {
    const fs::path roles_dir = fs::path(dir) / sub;
    if (!fs::exists(roles_dir, ec)) continue;
    for (const fs::directory_entry& entry : fs::directory_iterator(roles_dir, ec)) {
      if (entry.path().extension() != ".pub") continue;
      std::string key = read_public_key(entry.path().string());
      auto same = std::find_if(keys.begin(), keys.end(),
                               [&](const PeerIdentity& k) { return k.key == key; });
      if (same != keys.end())
        same->roles |= role;
      else
        keys.push_back(PeerIdentity{key, role, entry.path().stem().string()});
    }
    if (ec) throw AuthError(roles_dir.string() + ": cannot list: " + ec.message());
  }
  std::sort(keys.begin(), keys.end(),
            [](const PeerIdentity& a, const PeerIdentity& b) { return a.name < b.name; });
  return keys;
}

void RefusalLog::operator()(const std::string& line) {
  auto now = std::chrono::steady_clock::now();
  if (line == last_ && now - last_logged_ < std::chrono::seconds(10)) {
    ++repeats_;
    return;
  }
  if (repeats_ > 0) log_("(the refusal before came " + std::to_string(repeats_) + " more times)");
  log_(line);
  last_ = line;
  last_logged_ = now;
  repeats_ = 0;
}

CurveServer::CurveServer(zmq::context_t& context, zmq::socket_t& router, const ServerKeys& keys,
                         Log log)
    : authorized_dir_(keys.authorized_dir),
      admitted_(keys.admitted),
      refuse_(std::move(log)),
      zap_(context, zmq::socket_type::rep),
      stop_in_(context, zmq::socket_type::pair),
      stop_out_(context, zmq::socket_type::pair) {
  for (zmq::socket_t* s : {&zap_, &stop_in_, &stop_out_}) s->set(zmq::sockopt::linger, 0);
  // Bound before the ROUTER is: a CURVE server with no ZAP handler would admit every key.
  zap_.bind("inproc://zeromq.zap.01");
  std::string stop = unique_inproc("curve-stop");
  stop_in_.bind(stop);
  stop_out_.connect(stop);
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
                             {stop_in_.handle(), 0, ZMQ_POLLIN, 0}};
  while (true) {
    try {
      zmq::poll(items, 2, std::chrono::milliseconds(-1));
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;
      refuse_(std::string("authentication stopped: ") + e.what());
      return;  // no answers any more: handshakes wait, nobody gets in
    }
    if (items[1].revents & ZMQ_POLLIN) return;
    if (items[0].revents & ZMQ_POLLIN) {
      std::vector<zmq::message_t> request = receive_all(zap_);
      answer(request);
    }
  }
}

std::optional<PeerIdentity> CurveServer::admitted(const std::string& key) const {
  const std::vector<PeerIdentity> keys =
      authorized_dir_.empty() ? admitted_ : read_authorized_keys(authorized_dir_);
  for (const PeerIdentity& peer : keys)
    if (!key.empty() && peer.key == key) return peer;
  return std::nullopt;
}

void CurveServer::answer(std::vector<zmq::message_t>& request) {
  // ZAP 1.0 (https://rfc.zeromq.org/spec/27/): the reply is [version, request id, status code,
  // status text, user id, metadata].
  std::string status = "400", text = "key not authorized", user;
  zmq::message_t request_id;
  if (request.size() > 1) request_id.copy(request[1]);
  if (request.size() < 7 || request[0].to_string() != "1.0") {
    refuse_("refused a malformed ZAP request");
  } else {
    std::string address = request[3].to_string();
    if (address.empty() || address.rfind("localhost:", 0) == 0) address = "a local (ipc) peer";
    std::string key;
    if (request[5].to_string() == "CURVE" && request[6].size() == 32) {
      char z85[kKeyLength + 1];
      zmq_z85_encode(z85, request[6].data<uint8_t>(), 32);
      key = z85;
    }
    try {
      if (std::optional<PeerIdentity> peer = admitted(key)) {
        status = "200";
        text = "OK";
        user = to_user_id(*peer);
      } else {
        refuse_("refused a connection from " + address + ": its key " + key + " is not " +
                (authorized_dir_.empty() ? std::string("this master's local key")
                                         : "in " + authorized_dir_));
      }
    } catch (const AuthError& e) {
      status = "500";
      text = "authorized keys unreadable";
      refuse_("refused a connection from " + address + ": " + e.what());
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
