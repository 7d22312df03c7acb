// The record of this worker's latest job (protocol::DroppedJob): what it trained, wrote and
// measured, kept in memory and in its checkpoint directory until a master has heard it, so that
// a master that restarted (or was unreachable) while the job ran adopts what the job did instead
// of training it again, and so that a worker killed and started anew still says it.
//
// Several workers may share one checkpoint directory (one host's `hippo run`, an NFS export):
// each takes a slot N, the first one whose lock file `.hippo-last-job.N.lock` it can lock (flock,
// held for the process's life and released by the kernel however the process dies; lock files
// are never removed: one removed while another process opens it would give two workers one slot),
// and keeps its record in `.hippo-last-job.N`. A worker that takes a slot reads the record that a
// worker before it left there and reports it as its own (the master knows the job by its id and
// incarnation, not by who reports it).
//
// The file is the record's JSON (DroppedJob::to_json, one line), written whole to
// `.hippo-last-job.N.tmp` and renamed over the record, private (0600, or 0640 in a directory
// shared with its group: protocol/file_modes.h). It is written when the job ends, and otherwise at
// most once per heartbeat interval (write_every) while something changed: a worker killed mid-job
// loses at most that interval of its reports, like a master that hears progress with heartbeats.
// It is not fsynced (an fsync took 8 ms on a busy disk, against jobs of a few ms; the record costs
// 0.09 ms a job without): a killed process loses nothing of what it wrote (the page cache
// outlives it); a host that crashes may lose the last write, or leave a file that is not a
// record, which is refused; and the record never names a snapshot file before that file is
// durable, so it is never ahead of the disk. A record that cannot be read (too big, not a regular
// file, not a record) is logged and removed, never trusted: the worker starts without it. A write
// that fails (a full disk) is logged; the record stays in memory.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "protocol/clock.h"
#include "protocol/message.h"

namespace hippo::worker {

class JobRecord {
 public:
  // Takes a slot in the checkpoint directory `dir` (which exists) and reads what is there. A
  // directory where no slot can be locked (every one of kSlots taken, or no locks on its file
  // system) keeps the record in memory only, which the log says.
  explicit JobRecord(std::string dir);
  ~JobRecord();
  JobRecord(const JobRecord&) = delete;
  JobRecord& operator=(const JobRecord&) = delete;

  static constexpr int kSlots = 1024;

  // The record, if there is one that no master has heard yet.
  const std::optional<protocol::DroppedJob>& get() const { return record_; }
  // The record file's path ("" when the record is kept in memory only).
  const std::string& path() const { return path_; }

  // The record is written at most this often while its job runs (the heartbeat interval).
  void write_every(std::chrono::milliseconds interval) { interval_ = interval; }
  // A new job replaces the record (the master gives one only once it has the end of the last,
  // whose file is removed now).
  void start(const protocol::Job& job, const std::string& incarnation);
  // A snapshot of the running job whose file is durable (one kept in memory only is not
  // recorded: nothing of it survives the process).
  void snapshot(const protocol::Snapshot& s);
  // The metrics of one evaluation of the running job.
  void metric(int64_t step, const protocol::json& metrics);
  // The step the running job reached (between two steps: what changed is written when due).
  void progress(int64_t step);
  // The job ended: `done` when it ran to its end (at `step`: `to`, or where it diverged). Written
  // at once.
  void end(int64_t step, bool done, bool diverged);
  // A master welcomed a hello that carried the record: forgotten, its file removed.
  void heard();

 private:
  void update(int64_t step);  // reached and busy_s; written when due
  void save();
  void load();

  std::string dir_;
  std::string path_;  // "" without a slot
  int lock_fd_ = -1;
  std::optional<protocol::DroppedJob> record_;
  Clock::time_point started_;  // the running job's start (busy_s)
  std::chrono::milliseconds interval_{1000};
  Clock::time_point saved_;  // the last write of the file
  bool dirty_ = false;       // the record changed since
  bool failing_ = false;     // the last write failed (logged once)
};

}  // namespace hippo::worker
