// One process at a time changes a search plan: a master for as long as it runs, or
// `hippo checkpoints --free-to/--forget` while no master does. Each holds an exclusive flock on a
// lock file that follows the plan's identity, not the path it was given: one plan reached as
// plan.db, ./x/../plan.db or through a symlink is one lock. The kernel drops the lock with the
// process, so a killed master leaves nothing to clean up.
//
// The lock file is beside the plan (in the directory of the file itself, symlinks resolved), named
// by the plan's inode: `.hippo-plan-<inode>.lock`. Why not the path plus ".lock": a symlink or a
// second hard link is another path to the same plan, and two masters through two paths each
// thought the plan their own (both then died with "UNIQUE constraint failed", or, through a hard
// link, both "finished" while the plan kept one of their studies). Why not the device number as
// well: the lock file is in the plan's own directory, on the plan's file system, where the inode
// alone names the file; and the device number is the local kernel's name for a file system, which
// differs between the NFS clients that mount one export, so two hosts would miss each other.
//
// Why not flock on the plan itself: SQLite locks the plan with fcntl (POSIX) byte-range locks, and
// where flock is emulated with fcntl locks (NFS, some FUSE file systems) a flock on the plan is a
// whole-file write lock of the same kind: every other process's SQLite (the CLI reading a running
// master's plan) would meet it, and in this process SQLite's own unlocks of its ranges, and its
// closing of any descriptor of the plan, would release it.
//
// A plan with several hard links is refused, with an error that says so: SQLite names its
// write-ahead log after the path it opened, so each name has a log of its own, a reader through
// one name does not see the commits in the other's, and a checkpoint through one overwrites the
// other's pages. The lock is taken before the plan is opened (master/cli/cli_run.cc: a refused
// second master writes nothing, not even a log of its own), and again, sharing that one, by the
// Master that opens it; within one process, locks of one plan share one descriptor.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>

namespace hippo::master {

struct PlanLocked : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class PlanLock {
 public:
  // Takes the lock of the plan at `db` for `what` (e.g. "a master"). PlanLocked, saying so, if
  // another process holds it; std::runtime_error if the plan has several hard links or the lock
  // file cannot be opened. A missing plan is created empty with `create` (a master's first
  // start); without it, a plan that is not on disk (an in-memory plan that `hippo simulate` saves
  // there at its end) has nothing to lock. The plan itself is only stat'ed, never opened: closing
  // a descriptor of it would drop SQLite's own fcntl locks in this process.
  PlanLock(const std::string& db, const std::string& what, bool create = false);
  ~PlanLock();
  PlanLock(const PlanLock&) = delete;
  PlanLock& operator=(const PlanLock&) = delete;

  struct Held;  // the lock file's descriptor, shared by the locks of one plan in this process

 private:
  std::shared_ptr<Held> held_;
};

}  // namespace hippo::master
