// A trainer command as a child process (external_trainer.h drives it through the stage protocol).
// It is started with fork/exec, no shell, in a process group of its own, and dies with the worker
// (PR_SET_PDEATHSIG). This class knows nothing of stages: it writes what it is given to the
// trainer's stdin, cuts its stdout into lines, keeps the last bytes of its stderr for error
// messages (and passes them on to the worker's log line by line, escaped, each line starting
// "[trainer PID] ": protocol/text.h's PrintableLines), and kills the whole group when destroyed.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/text.h"

namespace hippo::worker {

// Everything that goes wrong with a trainer. `crashed`: its process ended without finishing the
// stage (killed by a signal, a non-zero exit, no done line); a new process may succeed, so the
// master tries the stage again. Anything else (a line that breaks the protocol, silence past the
// timeout) fails the trials through the stage at once.
struct TrainerError : std::runtime_error {
  explicit TrainerError(const std::string& what, bool crashed_ = false)
      : std::runtime_error(what), crashed(crashed_) {}
  bool crashed;
};

// "exited with status 3", "was killed by signal 9".
std::string describe_status(int wait_status);

class TrainerProcess {
 public:
  static constexpr size_t kMaxLineBytes = 1 << 20;

  // Starts argv with the environment `env` ("NAME=value" each; the worker's own when empty);
  // TrainerError when it cannot (no such program, no pipe, no fork).
  explicit TrainerProcess(const std::vector<std::string>& argv,
                          const std::vector<std::string>& env = {});
  ~TrainerProcess();  // kills the process group and reaps it
  TrainerProcess(const TrainerProcess&) = delete;
  TrainerProcess& operator=(const TrainerProcess&) = delete;

  pid_t pid() const { return pid_; }

  // Queues `text` for its stdin. With close_after, stdin is closed once the text is written, so
  // that a trainer reading to the end of its input sees the end.
  void write(std::string text, bool close_after);
  // Moves bytes for at most timeout_ms (0: only what is ready now): writes queued input, reads
  // stdout and stderr. Each complete stdout line goes to on_line (a trailing CR dropped, empty
  // lines skipped). Returns false once both stdout and stderr are closed (the trainer is ending).
  // A line longer than kMaxLineBytes throws TrainerError.
  bool pump(int timeout_ms, const std::function<void(std::string_view)>& on_line);
  // The bytes of stdout after its last newline (a last line that has none), cleared.
  std::string take_partial_line();

  // Whether it has exited (reaps it without waiting); wait_status() is then its status.
  bool exited();
  int wait_status() const { return status_; }

  // The error `what`, prefixed "external trainer: " and ending with the last lines of its stderr.
  TrainerError error(const std::string& what, bool crashed = false) const;

 private:
  void kill_group();
  // Bytes of its stderr to the worker's log (`ended`: its stderr closed, the last partial line).
  void log_stderr(std::string_view bytes, bool ended = false);

  pid_t pid_ = -1;
  int in_ = -1, out_ = -1, err_ = -1;
  int status_ = 0;
  bool reaped_ = false;
  std::string input_;  // queued for stdin
  size_t written_ = 0;
  bool close_after_input_ = false;
  std::string pending_;                                   // stdout bytes after the last newline
  std::string stderr_tail_;                               // the last bytes it wrote to stderr
  std::optional<protocol::PrintableLines> stderr_lines_;  // its stderr for the log, line by line
};

}  // namespace hippo::worker
