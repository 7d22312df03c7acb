#include "master/plan_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>

#include "protocol/file_modes.h"

namespace hippo::master {

struct PlanLock::Held {
  int fd = -1;
  ~Held() { ::close(fd); }  // releases the flock
};

namespace {

std::string error_text(int err) {
  return std::strerror(err);
}

// The locks this process holds, by the plan's inode: a second lock of one plan shares the first.
std::mutex held_mutex;
std::map<std::pair<dev_t, ino_t>, std::weak_ptr<PlanLock::Held>> held_locks;

}  // namespace

PlanLock::PlanLock(const std::string& db, const std::string& what, bool create) {
  // The plan itself, symlinks followed: stat, never open. Closing a descriptor of the plan
  // would drop every fcntl lock this process holds on it, SQLite's too (a Master locks a plan it
  // has opened already): another process's SQLite would then take itself for the plan's last
  // user, and delete the write-ahead log under this one.
  struct stat st {};
  if (::stat(db.c_str(), &st) != 0) {
    if (errno != ENOENT)
      throw std::runtime_error("cannot stat the search plan " + db + ": " + error_text(errno));
    if (!create) return;  // not on disk: nothing to lock
    // A new, empty file (SQLite makes a plan of it), which nobody has open.
    const std::filesystem::path given(db);
    const std::string dir = given.has_parent_path() ? given.parent_path().string() : ".";
    const int made = ::open(db.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                            protocol::file_mode_in(dir));
    if (made < 0 && errno != EEXIST)
      throw std::runtime_error("cannot create the search plan " + db + ": " + error_text(errno));
    if (made >= 0) ::close(made);
    if (::stat(db.c_str(), &st) != 0)
      throw std::runtime_error("cannot stat the search plan " + db + ": " + error_text(errno));
  }
  if (!S_ISREG(st.st_mode))
    throw std::runtime_error("the search plan " + db + " is not a regular file");
  if (st.st_nlink > 1)
    throw std::runtime_error(
        "the search plan " + db + " has " + std::to_string(st.st_nlink) +
        " hard links: SQLite keeps a write-ahead log per name, so each name would hold commits "
        "the others do not see; give the plan one name (remove the other links, or copy it)");
  std::error_code ec;
  const std::filesystem::path real = std::filesystem::canonical(db, ec);
  if (ec) throw std::runtime_error("cannot resolve the search plan " + db + ": " + ec.message());
  const std::string file =
      (real.parent_path() / (".hippo-plan-" + std::to_string(st.st_ino) + ".lock")).string();

  std::lock_guard<std::mutex> guard(held_mutex);
  const auto key = std::make_pair(st.st_dev, st.st_ino);
  if (std::shared_ptr<Held> held = held_locks[key].lock()) {
    held_ = std::move(held);
    return;
  }
  auto held = std::make_shared<Held>();
  held->fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW,
                    protocol::file_mode_in(real.parent_path().string()));
  if (held->fd < 0)
    throw std::runtime_error("cannot open the plan's lock file " + file + ": " + error_text(errno));
  if (::flock(held->fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK)
      throw PlanLocked("another process holds the search plan " + db + " (" + file +
                       "), most likely a master that runs on it; " + what + " needs it to itself");
    throw std::runtime_error("cannot lock " + file + ": " + error_text(errno));
  }
  // The path may have been given another plan meanwhile (a rename over it): then this lock is
  // not that plan's.
  struct stat now {};
  if (::stat(db.c_str(), &now) != 0 || now.st_dev != st.st_dev || now.st_ino != st.st_ino)
    throw PlanLocked("the search plan " + db + " was replaced while " + what +
                     " locked it; try again");
  held_locks[key] = held;
  held_ = std::move(held);
}

PlanLock::~PlanLock() = default;

}  // namespace hippo::master
