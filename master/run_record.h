// How a client finds the master of a `hippo run` (`hippo enqueue` without --master). A run's
// master listens on an ipc socket in a private temporary directory of its own (mode 0700: no other
// user can reach it), at a name nobody knows, and proves a key pair made for that run. While it
// runs, it records where it listens and its public key in the operator's $HIPPO_HOME/runs/
// (protocol::local_key_dir, ~/.hippo by default: a directory of this OS user's alone), in a file
// named by its plan's identity (`<device>-<inode>.json`: every path to one plan finds it, and a
// plan has one master at a time, plan_lock.h); it removes the record when it ends. A client of
// the same user reads it for the plan of its --db, connects, and proves the user's local key,
// which the run's master admits as a client (master/cli/cli_run.cc).
//
// Why there: only this user can write or read that directory, so a record found there was
// written by one of this user's processes, and the client trusts it as it trusts the local key
// beside it. A record from a run that was killed (SIGKILL leaves it) names a process that is gone,
// or a socket that is: it is ignored. A run on another host (a home directory shared over NFS)
// has another device number for the plan, so its records are not this host's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace hippo::master {

struct RunAddress {
  std::string address;     // ipc://<the run's directory>/master.sock
  std::string master_key;  // the run's master's public key (Z85)
  int64_t pid = 0;         // the `hippo run` process
};

// The record of a running `hippo run` on the plan at `db`: written (whole, then renamed into
// place) when constructed, removed when destroyed. std::runtime_error when it cannot be written
// (no $HIPPO_HOME or $HOME, a directory that is not this user's alone): the run then takes no
// client, and says why.
class RunRecord {
 public:
  RunRecord(const std::string& db, const RunAddress& run);
  ~RunRecord();
  RunRecord(const RunRecord&) = delete;
  RunRecord& operator=(const RunRecord&) = delete;

 private:
  std::string path_;
};

// The run of this user on this host that has the plan at `db`, if one is running now; nullopt
// when there is no record, or it is stale (its process or its socket is gone). std::runtime_error
// for a record that is not this user's, larger than a record can be, or malformed (it names the
// file).
std::optional<RunAddress> find_run(const std::string& db);

// A record at most this large is read (a real one is about 200 bytes).
inline constexpr int64_t kMaxRunRecordBytes = 4096;

}  // namespace hippo::master
