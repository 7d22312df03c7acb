#include "worker/job_record.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "protocol/file_modes.h"
#include "protocol/log.h"
#include "stagetree/sequence_json.h"

namespace hippo::worker {
namespace {

// Opens the lock file of a slot and locks it; -1 when another process holds it (`busy`) or it
// cannot be had (errno says why).
int lock_slot(const std::string& path, mode_t mode, bool& busy) {
  busy = false;
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, mode);
  if (fd < 0) {
    // Something planted at that name (a symlink, a directory), or another user's slot in a
    // directory shared with a group, makes the slot unusable, not the directory.
    busy = errno == ELOOP || errno == EISDIR || errno == ENXIO || errno == EACCES;
    return -1;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    busy = true;
    return -1;
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    ::close(fd);
    busy = e == EWOULDBLOCK;
    errno = e;
    return -1;
  }
  return fd;
}

// Writes all of `text` to fd; false (errno set) when it cannot.
bool write_all(int fd, const std::string& text) {
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = ENOSPC;
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

JobRecord::JobRecord(std::string dir) : dir_(std::move(dir)) {
  const mode_t mode = protocol::file_mode_in(dir_);
  std::string why;
  for (int slot = 0; slot < kSlots; ++slot) {
    const std::string base = dir_ + "/.hippo-last-job." + std::to_string(slot);
    bool busy = false;
    lock_fd_ = lock_slot(base + ".lock", mode, busy);
    if (lock_fd_ >= 0) {
      path_ = base;
      break;
    }
    why = "cannot lock " + base + ".lock: " +
          (errno == EWOULDBLOCK ? std::string("another worker holds it") : std::strerror(errno));
    if (!busy) break;
  }
  if (path_.empty()) {
    spdlog::warn(
        "the record of its latest job is kept in memory only ({}): a restarted worker "
        "will not say what it trained",
        why);
    return;
  }
  load();
}

JobRecord::~JobRecord() {
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the slot; its lock file stays (job_record.h)
}

void JobRecord::load() {
  std::string problem;
  const int fd = ::open(path_.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return;  // no record: the usual start
    problem = std::strerror(errno);
  } else {
    struct stat st {};
    std::string text;
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      problem = "not a regular file";
    } else if (st.st_size > protocol::kMaxMessageBytes) {
      problem = "over " + std::to_string(protocol::kMaxMessageBytes) + " bytes";
    } else {
      text.resize(static_cast<size_t>(st.st_size));
      size_t done = 0;
      while (done < text.size()) {
        const ssize_t n = ::read(fd, text.data() + done, text.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        done += static_cast<size_t>(n);
      }
      text.resize(done);
      try {
        if (json_nesting_beyond(text, 8) != std::string_view::npos)
          throw protocol::ProtocolError("nested too deeply");
        const protocol::json j = protocol::json::parse(text, nullptr, false);
        if (j.is_discarded() || !j.is_object()) throw protocol::ProtocolError("not a JSON object");
        record_ = protocol::DroppedJob::from_json(j);  // every field and check()
      } catch (const std::exception& e) {
        problem = e.what();
      }
    }
    ::close(fd);
  }
  if (!problem.empty()) {
    spdlog::warn("ignored and removed {}, which is not the record of a job: {}", path_, problem);
    ::unlink(path_.c_str());
    return;
  }
  spdlog::info(
      "the record of job {} (trial {}, steps {} to {}, reached {}{}) from {}: said in "
      "its hello",
      record_->job, record_->trial, record_->from, record_->to, record_->reached,
      record_->done ? ", done" : "", path_);
}

void JobRecord::start(const protocol::Job& job, const std::string& incarnation) {
  record_ = protocol::DroppedJob{.job = job.id,
                                 .trial = job.trial,
                                 .from = job.from,
                                 .to = job.to,
                                 .reported = job.from,
                                 .reached = job.from,
                                 .incarnation = incarnation};
  started_ = Clock::now();
  if (!path_.empty()) ::unlink(path_.c_str());
  dirty_ = true;
}

void JobRecord::update(int64_t step) {
  record_->reached = std::clamp(step, record_->reached, record_->to);
  record_->busy_s = seconds_since(started_);
  dirty_ = true;
  if (Clock::now() - saved_ >= interval_) save();
}

void JobRecord::snapshot(const protocol::Snapshot& s) {
  if (!record_ || s.job != record_->job || s.file.empty() || s.checksum.empty()) return;
  std::vector<protocol::DroppedSnapshot>& list = record_->snapshots;
  // In (from, to], increasing (they are announced in order), and at most the bound.
  if (s.step <= record_->from || s.step > record_->to ||
      (!list.empty() && s.step <= list.back().step) || list.size() == protocol::kMaxRecordedReports)
    return;
  list.push_back(
      {.step = s.step, .state = s.state, .file = s.file, .bytes = s.bytes, .checksum = s.checksum});
  record_->reported = s.step;
  update(s.step);
}

void JobRecord::metric(int64_t step, const protocol::json& metrics) {
  if (!record_) return;
  std::vector<protocol::DroppedMetric>& list = record_->metrics;
  if (step < record_->from || step > record_->to || (!list.empty() && step <= list.back().step) ||
      list.size() == protocol::kMaxRecordedReports)
    return;
  list.push_back({.step = step, .metrics = metrics});
  update(step);
}

void JobRecord::progress(int64_t step) {
  if (record_ && (step > record_->reached || dirty_)) update(step);
}

void JobRecord::end(int64_t step, bool done, bool diverged) {
  if (!record_) return;
  record_->done = done;
  record_->diverged = done && diverged;
  saved_ = {};  // written now
  update(step);
}

void JobRecord::heard() {
  record_.reset();
  if (!path_.empty()) ::unlink(path_.c_str());
}

void JobRecord::save() {
  saved_ = Clock::now();
  dirty_ = false;
  if (path_.empty() || !record_) return;
  // The temporary name is this slot's alone (its lock is ours): one left by a killed writer is
  // replaced, and nothing planted there is ever followed (O_EXCL | O_NOFOLLOW).
  const std::string temporary = path_ + ".tmp";
  ::unlink(temporary.c_str());
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                        protocol::file_mode_in(dir_));
  bool ok = fd >= 0 && write_all(fd, record_->to_json().dump() + "\n");
  int error = ok ? 0 : errno;
  if (fd >= 0) ::close(fd);
  if (ok && ::rename(temporary.c_str(), path_.c_str()) != 0) {
    ok = false;
    error = errno;
  }
  if (ok) {
    if (failing_) spdlog::info("the record of its latest job is written again to {}", path_);
    failing_ = false;
    return;
  }
  ::unlink(temporary.c_str());
  // Logged once while it fails (a full disk): the record stays in memory for the next hello.
  if (!failing_)
    spdlog::warn("cannot write the record of its latest job to {}: {}", path_,
                 std::strerror(error));
  failing_ = true;
}

}  // namespace hippo::worker
