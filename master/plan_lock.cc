#include "master/plan_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace hippo::master {

PlanLock::PlanLock(const std::string& db, const std::string& what) {
  const std::string file = db + ".lock";
  fd_ = open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd_ < 0)
    throw std::runtime_error("cannot open the plan's lock file " + file + ": " +
                             std::strerror(errno));
  if (flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    close(fd_);
    if (error == EWOULDBLOCK)
      throw PlanLocked("another process holds the search plan " + db + " (" + file +
                       "), most likely a master that runs on it; " + what + " needs it to itself");
    throw std::runtime_error("cannot lock " + file + ": " + std::strerror(error));
  }
}

PlanLock::~PlanLock() {
  close(fd_);  // releases the flock
}

}  // namespace hippo::master
