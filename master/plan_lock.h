// One process at a time changes a search plan's checkpoints: a master for as long as it runs, or
// `hippo checkpoints --free-to/--forget` while no master does. Each holds an exclusive flock on
// DB.lock, a file beside the plan (not the plan itself: SQLite's own locks are fcntl locks on it,
// which an flock emulated over NFS would meet). The kernel drops the lock with the process, so a
// killed master leaves nothing to clean up.
#pragma once

#include <stdexcept>
#include <string>

namespace hippo::master {

struct PlanLocked : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class PlanLock {
 public:
  // Takes the lock of the plan at `db` for `what` (e.g. "a master"); PlanLocked, saying so, if
  // another process holds it; std::runtime_error if the lock file cannot be opened.
  PlanLock(const std::string& db, const std::string& what);
  ~PlanLock();
  PlanLock(const PlanLock&) = delete;
  PlanLock& operator=(const PlanLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace hippo::master
