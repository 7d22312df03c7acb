// The checkpoint files an external trainer reads and writes, held to DESIGN's rule that a state is
// what its producer wrote (protocol/content_hash.h) at the point of use, not only at the point of
// the check: whoever may write in the checkpoint directory (a group, an NFS export) can replace a
// file between a check of its path and the next open of that path.
//
// Input: the worker checks the parent's bytes and gives the trainer a path to exactly those bytes,
// /proc/<worker pid>/fd/<N>, a descriptor the worker holds for the stage:
//   - the file itself, opened once, hashed through that descriptor, when nobody but the worker's
//     user may write its bytes (its owner, and no write bit for group or others; a rename or a
//     new file at its name does not change the inode the descriptor holds). Free: the check reads
//     the file once, as it did before, and the trainer reads it once;
//   - otherwise a private copy: the bytes read once, hashed as they are copied into a sealed
//     memfd (no write, no resize, by anyone), so that a file someone else may write in place is
//     never what the trainer reads. One more copy in memory (bench/bench_trainer.cc measures it).
// The Python helper checks the content hash again on the bytes it loads (python/hippo/trainer.py),
// so that a trainer that uses it is safe whatever gives it the path.
//
// Output: written_file() opens a trainer's checkpoint once, refuses anything but a regular file,
// makes it durable, and reads its size and content hash through that same descriptor; the caller
// compares that hash with the one the trainer reported (the helper's, computed as it wrote), so
// that a file replaced between the trainer's write and the worker's hash is refused, not vouched
// for.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace hippo::worker {

// A checkpoint file that cannot be read, or is not the state its producer wrote.
struct TrainerFileError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class VerifiedInput {
 public:
  // Opens the regular file at `path` (never through a symlink, never waiting on a FIFO) and checks
  // that its bytes have `content_hash` ("": unknown, a state recorded before content hashes: not
  // compared, but the trainer still reads the bytes read here). `copy`: always a private copy (the
  // benchmark's; otherwise it is chosen as above). TrainerFileError names the file and the problem.
  VerifiedInput(const std::string& path, const std::string& content_hash, bool copy = false);
  ~VerifiedInput();
  VerifiedInput(const VerifiedInput&) = delete;
  VerifiedInput& operator=(const VerifiedInput&) = delete;

  // What the trainer opens: /proc/<this process>/fd/<N>.
  const std::string& path() const { return view_; }
  // Whether the trainer reads a private copy (else the checked file itself).
  bool copied() const { return copied_; }

 private:
  int fd_ = -1;
  std::string view_;
  bool copied_ = false;
};

// The file a trainer said it wrote.
struct WrittenFile {
  int64_t bytes = 0;
  std::string content_hash;
};
// Opens `path` once (a regular file, no symlink, no FIFO), fsyncs it and its directory, and returns
// its size and content hash as read through that descriptor; TrainerFileError otherwise.
WrittenFile written_file(const std::string& path);

}  // namespace hippo::worker
