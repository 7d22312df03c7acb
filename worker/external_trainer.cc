#include "worker/external_trainer.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <vector>

#include "protocol/clock.h"
#include "stagetree/sequence_json.h"

namespace hippo::worker {
namespace {

using nlohmann::json;
constexpr size_t kMaxLineBytes = 1 << 20;
constexpr size_t kStderrTailBytes = 2000;

// The running trainer: its process group and our ends of its stdin, stdout and stderr. The
// destructor kills whatever is left of it, so no error path leaves a trainer behind.
struct Child {
  pid_t pid = -1;
  int in = -1, out = -1, err = -1;
  std::string stderr_tail;  // the last bytes it wrote to stderr, for error messages

  ~Child() {
    kill_group();
    for (int* fd : {&in, &out, &err}) close_fd(*fd);
  }
  static void close_fd(int& fd) {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
  void kill_group() {
    if (pid <= 0) return;
    ::kill(-pid, SIGKILL);  // the trainer and anything it started
    ::waitpid(pid, nullptr, 0);
    pid = -1;
  }
  // The error for `what`, with the last lines of stderr.
  TrainerError error(const std::string& what) const {
    std::string message = "external trainer: " + what;
    std::string tail = stderr_tail;
    while (!tail.empty() && (tail.back() == '\n' || tail.back() == ' ')) tail.pop_back();
    if (!tail.empty()) message += "; its stderr ends with: " + tail;
    return TrainerError(message);
  }
};

// Starts argv in a process group of its own with pipes for stdin, stdout and stderr. A command
// that cannot be executed is reported here (through a close-on-exec pipe that carries errno).
void start(Child& child, const std::vector<std::string>& argv) {
  std::vector<char*> args;  // built before fork: the child may only call async-signal-safe code
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int pipes[4][2];
  for (int i = 0; i < 4; ++i)
    if (::pipe2(pipes[i], O_CLOEXEC) != 0) {
      int e = errno;
      for (int j = 0; j < i; ++j) {
        ::close(pipes[j][0]);
        ::close(pipes[j][1]);
      }
      throw TrainerError(std::string("external trainer: cannot make a pipe: ") + std::strerror(e));
    }
  int *in = pipes[0], *out = pipes[1], *err = pipes[2], *exec_error = pipes[3];
  pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    ::dup2(in[0], 0);  // dup2 clears close-on-exec on the new descriptor
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    ::execvp(args[0], args.data());
    int e = errno;
    ssize_t ignored = ::write(exec_error[1], &e, sizeof e);
    (void)ignored;
    ::_exit(127);
  }
  for (int fd : {in[0], out[1], err[1], exec_error[1]}) ::close(fd);
  if (pid < 0) {
    for (int fd : {in[1], out[0], err[0], exec_error[0]}) ::close(fd);
    throw TrainerError(std::string("external trainer: cannot fork: ") + std::strerror(errno));
  }
  child.pid = pid;
  child.in = in[1];
  child.out = out[0];
  child.err = err[0];
  ::fcntl(child.in, F_SETFL, O_NONBLOCK);  // the stage is written as the trainer reads it
  int e = 0;
  ssize_t n;
  do n = ::read(exec_error[0], &e, sizeof e);
  while (n < 0 && errno == EINTR);
  ::close(exec_error[0]);
  if (n == static_cast<ssize_t>(sizeof e)) {
    ::waitpid(pid, nullptr, 0);
    child.pid = -1;
    throw TrainerError("external trainer: cannot run " + argv[0] + ": " + std::strerror(e));
  }
}

// write() to the trainer's stdin. A trainer that has exited makes it fail with EPIPE and raise
// SIGPIPE, whose default action would end this process: the signal is blocked for this thread
// during the write, and consumed if it came.
ssize_t write_to_pipe(int fd, const char* data, size_t n) {
  sigset_t pipe_signal, old;
  sigemptyset(&pipe_signal);
  sigaddset(&pipe_signal, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_signal, &old);
  ssize_t w = ::write(fd, data, n);
  int saved = errno;
  if (w < 0 && saved == EPIPE) {
    timespec none{};
    sigtimedwait(&pipe_signal, nullptr, &none);
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  errno = saved;
  return w;
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "was killed by signal " + std::to_string(WTERMSIG(status));
  return "ended with wait status " + std::to_string(status);
}

}  // namespace

json trainer_input(const protocol::Job& job, const std::string& checkpoint_dir) {
  const std::filesystem::path dir = std::filesystem::absolute(checkpoint_dir);
  json sequences = json::object(), values = json::object();
  for (const auto& [name, seq] : job.hyperparams) {
    sequences[name] = to_json(seq);
    json& per_step = values[name] = json::array();
    for (int64_t s = job.from; s < job.to; ++s)
      per_step.push_back(seq.is_text() ? json(seq.text_value()) : json(seq.value_at(s)));
  }
  json outputs = json::array();
  for (const protocol::SnapshotOrder& order : job.snapshots)
    if (!order.file.empty()) outputs.push_back({{"step", order.step}, {"path", dir / order.file}});
  return {{"hippo_trainer", 1},
          {"model", job.run.model},
          {"data",
           {{"name", job.run.data},
            {"train_samples", job.run.train_samples},
            {"eval_samples", job.run.eval_samples}}},
          {"seed", job.run.seed},
          {"fixed", job.run.fixed},
          {"from", job.from},
          {"to", job.to},
          {"input_checkpoint",
           job.parent_file.empty() ? json(nullptr) : json((dir / job.parent_file).string())},
          {"checkpoints", outputs},
          {"eval_steps", job.eval_steps},
          {"hyperparameters", sequences},
          {"values", values}};
}

TrainerLine parse_trainer_line(std::string_view text) {
  auto bad = [&](const std::string& why) {
    std::string shown(text.substr(0, 200));
    if (text.size() > 200) shown += "...";
    return TrainerError("output line '" + shown + "': " + why);
  };
  if (json_nesting_beyond(text, 8) != std::string_view::npos) throw bad("nested too deeply");
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) throw bad("expected one JSON object on one line");
  auto step_of = [&](const char* key) {
    const json& v = j[key];
    if (!v.is_number_integer() ||
        (v.is_number_unsigned() ? v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)
                                : v.get<int64_t>() < 0))
      throw bad(std::string(key) + ": expected a step (an integer >= 0)");
    return v.get<int64_t>();
  };
  TrainerLine line;
  if (j.contains("done")) {
    if (j.size() != 1 || j["done"] != true) throw bad("a done line is exactly {\"done\": true}");
    line.kind = TrainerLine::Kind::kDone;
  } else if (j.contains("checkpoint")) {
    if (j.size() != 1) throw bad("a checkpoint line is exactly {\"checkpoint\": STEP}");
    line.kind = TrainerLine::Kind::kCheckpoint;
    line.step = step_of("checkpoint");
  } else if (j.contains("metric")) {
    if (j.size() != 3 || !j.contains("step") || !j.contains("value"))
      throw bad("a metric line is exactly {\"step\": S, \"metric\": NAME, \"value\": X}");
    line.kind = TrainerLine::Kind::kMetric;
    line.step = step_of("step");
    if (!j["metric"].is_string() || j["metric"].get<std::string>().empty() ||
        j["metric"].get<std::string>().size() > 64)
      throw bad("metric: expected a name (a string of 1 to 64 characters)");
    line.metric = j["metric"];
    if (!j["value"].is_number()) throw bad("value: expected a number");
    line.value = j["value"];
  } else if (j.size() == 1 && j.contains("step")) {
    line.kind = TrainerLine::Kind::kProgress;
    line.step = step_of("step");
  } else {
    throw bad("expected a metric, checkpoint, progress or done line");
  }
  return line;
}

bool run_external_trainer(const protocol::Job& job, const std::string& checkpoint_dir,
                          const TrainerHooks& hooks) {
  std::vector<std::string> argv;
  const json& command = job.run.model.contains("command") ? job.run.model["command"] : json();
  if (!command.is_array() || command.empty())
    throw TrainerError("external trainer: model.command: expected a list of strings");
  for (const json& a : command) {
    if (!a.is_string() || a.get<std::string>().empty() ||
        a.get<std::string>().find('\0') != std::string::npos)
      throw TrainerError("external trainer: model.command: expected non-empty strings");
    argv.push_back(a);
  }
  const std::string input = trainer_input(job, checkpoint_dir).dump() + "\n";

  Child child;
  start(child, argv);

  // What the trainer has reported so far.
  int64_t step = job.from;
  size_t next_eval = 0;  // index of the evaluation step whose metrics are being collected
  json metrics = json::object();
  size_t next_checkpoint = 0;  // index of the first snapshot order not yet reported
  bool done = false;
  int line_number = 0;

  auto flush_metrics = [&] {
    if (metrics.empty()) return;
    hooks.metrics(job.eval_steps[next_eval], metrics);
    metrics = json::object();
    ++next_eval;
  };
  // Every ordered checkpoint up to `upto` must exist now; each is reported once, in step order.
  auto report_checkpoints = [&](int64_t upto) {
    for (; next_checkpoint < job.snapshots.size() && job.snapshots[next_checkpoint].step <= upto;
         ++next_checkpoint) {
      const protocol::SnapshotOrder& order = job.snapshots[next_checkpoint];
      if (order.file.empty()) continue;
      std::error_code ec;
      if (!std::filesystem::is_regular_file(std::filesystem::path(checkpoint_dir) / order.file, ec))
        throw child.error("the checkpoint for step " + std::to_string(order.step) + " (" +
                          order.file + ") was not written");
      hooks.checkpoint(order.step);
    }
  };
  auto handle_line = [&](std::string_view text) {
    ++line_number;
    if (done) throw child.error("output after the done line: '" + std::string(text) + "'");
    TrainerLine line;
    try {
      line = parse_trainer_line(text);
    } catch (const TrainerError& e) {
      throw child.error(e.what());
    }
    const std::string where = "line " + std::to_string(line_number) + ": ";
    switch (line.kind) {
      case TrainerLine::Kind::kMetric:
        if (!metrics.empty() && line.step != job.eval_steps[next_eval]) flush_metrics();
        if (next_eval >= job.eval_steps.size() || line.step != job.eval_steps[next_eval])
          throw child.error(where + "a metric for step " + std::to_string(line.step) +
                            (next_eval < job.eval_steps.size()
                                 ? ", but the next evaluation step is " +
                                       std::to_string(job.eval_steps[next_eval])
                                 : ", but no more evaluations were asked for") +
                            " (eval_steps: " + json(job.eval_steps).dump() + ")");
        if (metrics.contains(line.metric))
          throw child.error(where + "metric " + line.metric + " for step " +
                            std::to_string(line.step) + " twice");
        metrics[line.metric] = line.value;
        step = std::max(step, line.step);
        break;
      case TrainerLine::Kind::kCheckpoint: {
        flush_metrics();
        bool ordered = false;
        for (size_t i = next_checkpoint; i < job.snapshots.size(); ++i)
          ordered =
              ordered || (job.snapshots[i].step == line.step && !job.snapshots[i].file.empty());
        if (!ordered)
          throw child.error(where + "a checkpoint for step " + std::to_string(line.step) +
                            ", which is not an output checkpoint still to write");
        report_checkpoints(line.step);
        step = std::max(step, line.step);
        break;
      }
      case TrainerLine::Kind::kProgress:
        if (line.step < step || line.step > job.to)
          throw child.error(where + "progress to step " + std::to_string(line.step) +
                            " is outside [" + std::to_string(step) + ", " + std::to_string(job.to) +
                            "]");
        if (!metrics.empty() && line.step > job.eval_steps[next_eval]) flush_metrics();
        step = line.step;
        break;
      case TrainerLine::Kind::kDone:
        flush_metrics();
        if (next_eval < job.eval_steps.size())
          throw child.error(where + "done, but no metrics came for step " +
                            std::to_string(job.eval_steps[next_eval]));
        report_checkpoints(job.to);
        step = job.to;
        done = true;
        break;
    }
  };

  size_t written = 0;
  std::string pending;  // stdout bytes after the last newline
  auto last_line = Clock::now(), last_tick = Clock::now();
  char buf[65536];
  while (child.out >= 0 || child.err >= 0) {
    pollfd fds[3];
    nfds_t n = 0;
    for (int fd : {child.in, child.out, child.err})
      if (fd >= 0) fds[n++] = {fd, static_cast<short>(fd == child.in ? POLLOUT : POLLIN), 0};
    if (::poll(fds, n, hooks.tick_ms) < 0 && errno != EINTR)
      throw child.error(std::string("poll failed: ") + std::strerror(errno));
    for (nfds_t i = 0; i < n; ++i) {
      if (fds[i].revents == 0) continue;
      if (fds[i].fd == child.in) {
        ssize_t w = write_to_pipe(child.in, input.data() + written, input.size() - written);
        if (w > 0) written += static_cast<size_t>(w);
        // Fully written, or the trainer closed its stdin (its exit status will tell why).
        if (written == input.size() || (w < 0 && errno != EAGAIN && errno != EINTR))
          Child::close_fd(child.in);
        continue;
      }
      ssize_t r = ::read(fds[i].fd, buf, sizeof buf);
      if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (r <= 0) {
        Child::close_fd(fds[i].fd == child.out ? child.out : child.err);
        continue;
      }
      if (fds[i].fd == child.err) {
        // Passed on to the worker's log, and kept for the error message.
        ssize_t ignored = ::write(2, buf, static_cast<size_t>(r));
        (void)ignored;
        child.stderr_tail.append(buf, static_cast<size_t>(r));
        if (child.stderr_tail.size() > kStderrTailBytes)
          child.stderr_tail.erase(0, child.stderr_tail.size() - kStderrTailBytes);
        continue;
      }
      pending.append(buf, static_cast<size_t>(r));
      size_t start = 0, end;
      while ((end = pending.find('\n', start)) != std::string::npos) {
        std::string_view text(pending.data() + start, end - start);
        if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
        if (!text.empty()) handle_line(text);
        start = end + 1;
        last_line = Clock::now();
      }
      pending.erase(0, start);
      if (pending.size() > kMaxLineBytes)
        throw child.error("an output line longer than " + std::to_string(kMaxLineBytes) + " bytes");
    }
    if (seconds_since(last_tick) * 1000 >= hooks.tick_ms) {
      last_tick = Clock::now();
      if (!hooks.tick(step)) return false;  // ~Child kills it
    }
    if (seconds_since(last_line) > hooks.timeout_s)
      throw child.error("no output line for " +
                        std::to_string(static_cast<int64_t>(hooks.timeout_s)) +
                        " s (the worker's --trainer-timeout); killed");
  }
  if (!pending.empty()) handle_line(pending);  // a last line without its newline

  // Both of its outputs are closed: it has ended, or will in a moment.
  int status = 0;
  while (true) {
    pid_t r = ::waitpid(child.pid, &status, WNOHANG);
    if (r == child.pid) break;
    if (r < 0 && errno != EINTR)
      throw child.error(std::string("waitpid failed: ") + std::strerror(errno));
    if (seconds_since(last_tick) * 1000 >= hooks.tick_ms) {
      last_tick = Clock::now();
      if (!hooks.tick(step)) return false;
    }
    if (seconds_since(last_line) > hooks.timeout_s)
      throw child.error("closed its output but did not exit; killed");
    ::usleep(10000);
  }
  child.pid = -1;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) throw child.error(describe_status(status));
  if (!done) throw child.error("exited without a done line");
  return true;
}

}  // namespace hippo::worker
