#include "master/run_record.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "protocol/auth.h"

namespace hippo::master {
namespace {

using nlohmann::json;

std::string runs_dir() {
  return protocol::local_key_dir() + "/runs";
}

// A directory that only this user can enter (else another user could have planted what is in it).
void check_private_dir(const std::string& dir) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) throw std::runtime_error(dir + ": " + std::strerror(errno));
  if (!S_ISDIR(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 077) != 0)
    throw std::runtime_error(dir + ": not a directory of this user's alone (uid " +
                             std::to_string(::geteuid()) + ", mode 0700)");
}

// The record's file for the plan at `db`: named by the plan's identity on this host.
std::string record_path(const std::string& db) {
  struct stat st {};
  if (::stat(db.c_str(), &st) != 0)
    throw std::runtime_error("cannot stat the search plan " + db + ": " + std::strerror(errno));
  return runs_dir() + "/" + std::to_string(st.st_dev) + "-" + std::to_string(st.st_ino) + ".json";
}

}  // namespace

RunRecord::RunRecord(const std::string& db, const RunAddress& run) {
  const std::string home = protocol::local_key_dir(), dir = runs_dir();
  check_private_dir(home);
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    throw std::runtime_error(dir + ": cannot create: " + std::strerror(errno));
  check_private_dir(dir);
  const std::string path = record_path(db);
  const std::string text =
      json{{"address", run.address}, {"master_key", run.master_key}, {"pid", run.pid}}.dump() +
      "\n";
  // Whole under a temporary name, then renamed over a stale record of an earlier run.
  std::string temp = path + ".XXXXXX";
  const int fd = ::mkstemp(temp.data());
  if (fd < 0) throw std::runtime_error(dir + ": cannot write: " + std::strerror(errno));
  const bool written = ::fchmod(fd, 0600) == 0 &&
                       ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int err = errno;
  ::close(fd);
  if (!written || ::rename(temp.c_str(), path.c_str()) != 0) {
    const int why = written ? errno : err;
    ::unlink(temp.c_str());
    throw std::runtime_error(path + ": cannot write: " + std::strerror(why));
  }
  path_ = path;
}

RunRecord::~RunRecord() {
  ::unlink(path_.c_str());
}

std::optional<RunAddress> find_run(const std::string& db) {
  const std::string dir = runs_dir(), path = record_path(db);
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0 && errno == ENOENT) return std::nullopt;  // no run ever
  check_private_dir(dir);
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::nullopt;
    throw std::runtime_error(path + ": " + std::strerror(errno));
  }
  // Its size before a byte is read into memory.
  std::string text;
  const bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid();
  if (regular && st.st_size <= kMaxRunRecordBytes) {
    text.resize(static_cast<size_t>(st.st_size));
    const ssize_t n = ::read(fd, text.data(), text.size());
    text.resize(n > 0 ? static_cast<size_t>(n) : 0);
  }
  ::close(fd);
  if (!regular) throw std::runtime_error(path + ": not a file of this user");
  if (st.st_size > kMaxRunRecordBytes)
    throw std::runtime_error(path + ": " + std::to_string(st.st_size) +
                             " bytes, more than a run's record has (" +
                             std::to_string(kMaxRunRecordBytes) + ")");
  RunAddress run;
  try {
    const json j = json::parse(text);
    run.address = j.at("address").get<std::string>();
    run.master_key = j.at("master_key").get<std::string>();
    run.pid = j.at("pid").get<int64_t>();
  } catch (const json::exception& e) {
    throw std::runtime_error(path + ": not a run's record: " + e.what());
  }
  if (run.address.rfind("ipc://", 0) != 0 || !protocol::is_key_text(run.master_key) || run.pid <= 0)
    throw std::runtime_error(path + ": not a run's record (address, master_key or pid)");
  // A run that was killed left its record: its process, or its socket, is gone.
  struct stat socket {};
  if (::kill(static_cast<pid_t>(run.pid), 0) != 0 ||
      ::stat(run.address.substr(6).c_str(), &socket) != 0 || !S_ISSOCK(socket.st_mode))
    return std::nullopt;
  return run;
}

}  // namespace hippo::master
