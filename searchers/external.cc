#include "searchers/external.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "protocol/text.h"
#include "stagetree/json_number.h"

extern char** environ;

namespace hippo {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr size_t kMaxLine = 1 << 20;                     // bytes of one reply, without its newline
constexpr int64_t kMaxLength = 1'000'000'000'000;        // steps, as for the spec's lengths
constexpr auto kGrace = std::chrono::milliseconds(200);  // to exit after its stdin is closed

std::string errno_text(const char* what) {
  return std::string(what) + ": " + std::strerror(errno);
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")";
  return "ended";
}

// Blocks SIGPIPE in this thread while it lives, so that writing to a process that has gone fails
// with EPIPE instead of killing the master; a SIGPIPE raised meanwhile is taken back.
class NoSigpipe {
 public:
  NoSigpipe() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~NoSigpipe() {
    sigset_t pending;
    sigpending(&pending);
    if (sigismember(&pending, SIGPIPE) && !sigismember(&old_, SIGPIPE)) {
      timespec zero{0, 0};
      sigtimedwait(&pipe_, nullptr, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }

 private:
  sigset_t pipe_, old_;
};

int ms_until(Clock::time_point deadline) {
  auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, INT32_MAX));
}

}  // namespace

// A child process spoken to in lines: its stdin and stdout are pipes (non-blocking on our side, so
// that no read or write waits past a deadline). Its stderr is a pipe too, read whenever we wait
// for its reply and when it ends, and passed on to ours line by line, escaped, each line naming
// its source (protocol/text.h's PrintableLines): a searcher's output never moves our terminal's
// cursor nor forges a line of our log. It leads a process group of its own, so that ending it also
// ends whatever it started.
class LineProcess {
 public:
  LineProcess(const std::vector<std::string>& command, const std::string& stderr_prefix)
      : stderr_lines_(stderr_prefix) {
    int in[2], out[2], err[2];
    if (pipe2(in, O_CLOEXEC) != 0) throw std::runtime_error(errno_text("pipe"));
    if (pipe2(out, O_CLOEXEC) != 0) {
      close(in[0]);
      close(in[1]);
      throw std::runtime_error(errno_text("pipe"));
    }
    if (pipe2(err, O_CLOEXEC) != 0) {
      for (int fd : {in[0], in[1], out[0], out[1]}) close(fd);
      throw std::runtime_error(errno_text("pipe"));
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in[0], STDIN_FILENO);  // dup2 clears O_CLOEXEC
    posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&actions, err[1], STDERR_FILENO);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(
        &attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    posix_spawnattr_setpgroup(&attr, 0);
    sigset_t none, pipe;
    sigemptyset(&none);
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &pipe);
    std::vector<char*> argv;
    for (const std::string& a : command) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    int rc = posix_spawnp(&pid_, argv[0], &actions, &attr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    close(in[0]);
    close(out[1]);
    close(err[1]);
    to_ = in[1];
    from_ = out[0];
    errors_ = err[0];
    if (rc != 0) {
      pid_ = -1;
      close(to_);
      close(from_);
      close(errors_);
      throw std::runtime_error(std::string("cannot start it: ") + std::strerror(rc));
    }
    for (int fd : {to_, from_, errors_}) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  }

  ~LineProcess() { end(true); }

  pid_t pid() const { return pid_; }

  // Writes `line` and a newline, and returns the line it answers, without the newline, all
  // within `timeout_s`. Output that came before it was asked for is an error: replies must pair
  // with events.
  std::string exchange(const std::string& line, double timeout_s) {
    auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(timeout_s));
    auto late = [&](const char* what) {
      end(false);
      char seconds[32];
      std::snprintf(seconds, sizeof seconds, "%g", timeout_s);
      return std::runtime_error(std::string(what) + " within timeout_s = " + seconds + " s");
    };
    if (!buffer_.empty() || read_some(0))
      throw std::runtime_error("wrote a line nobody asked for: " +
                               brief(buffer_.substr(0, buffer_.find('\n'))));
    std::string text = line + "\n";
    NoSigpipe guard;
    for (size_t done = 0; done < text.size();) {
      ssize_t n = write(to_, text.data() + done, text.size() - done);
      if (n > 0) {
        done += static_cast<size_t>(n);
      } else if (errno == EAGAIN) {
        pollfd p{to_, POLLOUT, 0};
        if (poll(&p, 1, ms_until(deadline)) == 0) throw late("did not read its input");
      } else if (errno == EPIPE) {
        throw std::runtime_error(ended("closed its input"));
      } else if (errno != EINTR) {
        throw std::runtime_error(errno_text("write"));
      }
    }
    for (;;) {
      size_t newline = buffer_.find('\n');
      if (newline != std::string::npos) {
        if (newline > kMaxLine) break;
        std::string reply = buffer_.substr(0, newline);
        buffer_.erase(0, newline + 1);
        return reply;
      }
      if (buffer_.size() > kMaxLine) break;
      int wait = ms_until(deadline);
      if (wait == 0) throw late("no reply");
      read_some(wait);
    }
    throw std::runtime_error("wrote a line longer than 1 MiB");
  }

  // Closes its stdin, gives it `grace` to exit, kills its process group and reaps it. Returns
  // how it ended when it exited by itself, else "".
  std::string end(bool grace) {
    if (pid_ < 0) return "";
    close(to_);
    close(from_);
    pass_stderr(16);  // a process blocked on a full stderr pipe can then exit
    // Wait without reaping, so that its pid, and with it the group id, stays reserved for kill.
    siginfo_t info{};
    auto until = Clock::now() + (grace ? kGrace : Clock::duration::zero());
    for (;;) {
      info.si_pid = 0;
      if (waitid(P_PID, pid_, &info, WEXITED | WNOHANG | WNOWAIT) != 0 && errno != EINTR) break;
      if (info.si_pid == pid_ || Clock::now() >= until) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    bool exited = info.si_pid == pid_;
    kill(-pid_, SIGKILL);
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    pass_stderr(16);     // what it wrote before it ended
    if (errors_ >= 0) {  // open still (a process it started outside its group holds it)
      write_stderr(stderr_lines_.flush());
      close(errors_);
      errors_ = -1;
    }
    return exited ? describe_status(status) : "";
  }

 private:
  // Reads what is there within `wait_ms` into buffer_ (and its stderr, passed on); false when
  // nothing came on stdout.
  bool read_some(int wait_ms) {
    pollfd p[2] = {{from_, POLLIN, 0}, {errors_, POLLIN, 0}};
    if (poll(p, errors_ >= 0 ? 2 : 1, wait_ms) <= 0) return false;
    if (p[1].revents != 0) pass_stderr(1);
    if (p[0].revents == 0) return false;
    char chunk[65536];
    ssize_t n = read(from_, chunk, sizeof chunk);
    if (n == 0) throw std::runtime_error(ended("closed its output"));
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) return false;
      throw std::runtime_error(errno_text("read"));
    }
    buffer_.append(chunk, static_cast<size_t>(n));
    return true;
  }

  // Ends it after it closed its input or output; says how.
  std::string ended(const char* what) {
    std::string how = end(true);
    return how.empty() ? std::string(what) + " and did not exit" : how;
  }

  // Passes on what its stderr has now, at most `rounds` reads of it (bounded: a process may write
  // without end); at its end the pipe is closed here.
  void pass_stderr(int rounds) {
    char chunk[65536];
    for (int i = 0; errors_ >= 0 && i < rounds; ++i) {
      const ssize_t n = read(errors_, chunk, sizeof chunk);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return;  // nothing more now (EAGAIN)
      if (n == 0) {
        write_stderr(stderr_lines_.flush());
        close(errors_);
        errors_ = -1;
        return;
      }
      write_stderr(stderr_lines_.add(std::string_view(chunk, static_cast<size_t>(n))));
    }
  }
  static void write_stderr(const std::string& lines) {
    if (!lines.empty()) std::fwrite(lines.data(), 1, lines.size(), stderr);
  }

  pid_t pid_ = -1;
  int to_ = -1, from_ = -1, errors_ = -1;
  std::string buffer_;  // read, not yet returned
  protocol::PrintableLines stderr_lines_;
};

ExternalSearcher::ExternalSearcher(const StudySpec& spec) : spec_(spec) {
  Field options(spec.searcher.options, "searcher");
  Field command = options["command"];
  for (size_t i = 0, n = command.items(1); i < n; ++i) {
    command_.push_back(command[i].text());
    if (command_.back().empty()) command[i].fail("expected a non-empty string");
  }
  if (options.has("timeout_s")) {
    Field t = options["timeout_s"];
    timeout_s_ = t.number();
    if (!(timeout_s_ > 0 && timeout_s_ <= 3600))
      t.fail("expected a number in (0, 3600], got " + brief(t.json()));
  }
  std::string words;
  for (const std::string& a : command_) words += (words.empty() ? "" : " ") + a;
  label_ = "external searcher \"" + words + "\"";
}

ExternalSearcher::~ExternalSearcher() = default;

pid_t ExternalSearcher::pid() const {
  return process_ ? process_->pid() : -1;
}

void ExternalSearcher::talk(const json& event,
                            const std::function<void(const Field& reply)>& check) const {
  if (!error_.empty()) throw std::runtime_error(error_);
  const std::string name = event.at("event");
  if (final_state_) throw std::logic_error(label_ + ": event \"" + name + "\" after finish");
  if (!process_ && name != "start" && name != "load")
    throw std::logic_error(label_ + ": event \"" + name + "\" before start or load");
  try {
    if (!process_)
      process_ = std::make_unique<LineProcess>(
          command_, "[searcher of " + protocol::printable(spec_.name) + "] ");
    json reply = parse_json_text(process_->exchange(event.dump(), timeout_s_));
    check(Field(reply, ""));
  } catch (const std::exception& e) {
    error_ = label_ + ", event \"" + name + "\": " + e.what();
    process_.reset();
    throw std::runtime_error(error_);
  }
}

json ExternalSearcher::study_event(const char* name) const {
  json space = json::array();
  // The batch size, and so an epoch, differs between trials; or each trial ends with its cooldown.
  bool per_trial_length = !spec_.one_length();
  for (const Param& p : spec_.space.params()) {
    static const char* const kKinds[] = {"grid", "choice", "uniform", "loguniform", "int"};
    json leaf = {{"name", p.name}, {"kind", kKinds[static_cast<int>(p.kind)]}};
    if (p.kind == DistKind::kGrid || p.kind == DistKind::kChoice)
      leaf["values"] = p.values;
    else if (p.kind == DistKind::kInt)
      leaf["range"] = {static_cast<int64_t>(p.lo), static_cast<int64_t>(p.hi)};
    else
      leaf["range"] = {p.lo, p.hi};
    space.push_back(std::move(leaf));
    per_trial_length = per_trial_length || p.name == "batch_size";
  }
  json event = {{"event", name},
                {"space", space},
                {"seed", spec_.seed},
                {"metric", spec_.searcher.metric},
                {"mode", spec_.searcher.maximize ? "max" : "min"},
                {"max_trials", nullptr},
                {"length", nullptr},
                {"eval_steps", nullptr}};
  // The goals in full only when the spec names them: a spec of one metric and mode sends what it
  // did before objectives existed, so that every searcher written then reads it unchanged.
  const Goals& goals = spec_.searcher.goals;
  if (goals.multi()) {
    json objectives = json::array(), constraints = json::array();
    for (const Objective& o : goals.objectives)
      objectives.push_back({{"metric", o.metric}, {"mode", o.maximize ? "max" : "min"}});
    for (const Constraint& c : goals.constraints) {
      json bounds = {{"metric", c.metric}};
      if (c.min) bounds["min"] = *c.min;
      if (c.max) bounds["max"] = *c.max;
      constraints.push_back(std::move(bounds));
    }
    event["objectives"] = std::move(objectives);
    event["constraints"] = std::move(constraints);
  }
  if (spec_.searcher.max_trials) event["max_trials"] = *spec_.searcher.max_trials;
  if (!per_trial_length) {
    event["length"] = spec_.length_steps(Params::object());
    event["eval_steps"] = spec_.eval_steps(Params::object());
  }
  return event;
}

std::vector<Operation> ExternalSearcher::operations(const json& event) {
  std::vector<Operation> ops;
  talk(event, [&](const Field& reply) {
    reply.check_keys({"operations"});
    Field list = reply["operations"];
    for (size_t i = 0, n = list.items(0); i < n; ++i) ops.push_back(operation(list[i]));
  });
  if (std::none_of(ops.begin(), ops.end(),
                   [](const Operation& op) { return std::holds_alternative<Finish>(op); }))
    return ops;
  // Finished: no event comes any more but save(), so the final state is taken now and the
  // process ends rather than idle until the master does.
  json state;
  talk({{"event", "save"}}, [&](const Field& reply) {
    reply.check_keys({"state"});
    state = reply["state"].json();
  });
  process_.reset();
  final_state_ = std::move(state);
  return ops;
}

RequestId ExternalSearcher::known_trial(const Field& trial) const {
  RequestId id = trial.integer(0, INT64_MAX);
  if (id >= static_cast<RequestId>(trials_.size()))
    trial.fail("no trial " + std::to_string(id) + " was created");
  return id;
}

Operation ExternalSearcher::operation(const Field& f) {
  const std::string& op = f["op"].text();
  if (op == "create") {
    f.check_keys({"op", "trial", "params", "fork"});
    RequestId id = f["trial"].integer(0, INT64_MAX);
    if (id != static_cast<RequestId>(trials_.size()))
      f["trial"].fail("expected " + std::to_string(trials_.size()) +
                      " (trial ids are 0, 1, 2, ... in creation order)");
    if (spec_.searcher.max_trials && id >= *spec_.searcher.max_trials)
      f["trial"].fail("the spec's max_trials is " + std::to_string(*spec_.searcher.max_trials));
    Field params = f["params"];
    try {
      spec_.hyperparams(params.json());
    } catch (const SpecError& e) {
      params.fail(e.what());
    }
    Create c{id, params.json(), std::nullopt};
    if (f.has("fork")) {
      Field fork = f["fork"];
      fork.check_keys({"donor", "step"});
      c.fork = Fork{known_trial(fork["donor"]), fork["step"].integer(0, kMaxLength)};
    }
    trials_.push_back(c.params);
    return c;
  }
  if (op == "train") {
    f.check_keys({"op", "trial", "length", "eval_steps"});
    Train t{known_trial(f["trial"]), 0, {}};
    if (f["length"].json() == "full") {
      if (f.has("eval_steps")) f["eval_steps"].fail("not allowed with \"length\": \"full\"");
      t.length = spec_.length_steps(trials_[t.trial]);
      t.eval_steps = spec_.eval_steps(trials_[t.trial]);
      return t;
    }
    if (!f["length"].json().is_number()) f["length"].fail("expected a number of steps or \"full\"");
    t.length = f["length"].integer(1, kMaxLength);
    Field steps = f["eval_steps"];
    for (size_t i = 0, n = steps.items(0); i < n; ++i) {
      int64_t s = steps[i].integer(1, t.length);
      if (!t.eval_steps.empty() && s <= t.eval_steps.back())
        steps[i].fail("expected increasing steps, got " + brief(steps.json()));
      t.eval_steps.push_back(s);
    }
    return t;
  }
  if (op == "stop") {
    f.check_keys({"op", "trial"});
    return Stop{known_trial(f["trial"])};
  }
  if (op == "finish") {
    f.check_keys({"op"});
    return Finish{};
  }
  f["op"].fail("unknown operation " + brief(f["op"].json()) +
               " (expected create, train, stop or finish)");
}

json ExternalSearcher::trial_event(const char* name, RequestId trial) const {
  if (trial < 0 || trial >= static_cast<RequestId>(trials_.size()))
    throw std::invalid_argument(label_ + ": no trial " + std::to_string(trial));
  return {{"event", name}, {"trial", trial}};
}

std::vector<Operation> ExternalSearcher::on_study_start() {
  return operations(study_event("start"));
}

json ExternalSearcher::validation_event(RequestId trial, int64_t step, double value) const {
  json event = trial_event("validation", trial);
  event["step"] = step;
  event["value"] = std::isfinite(value) ? json(value) : json();  // JSON has no NaN or infinity
  return event;
}

std::vector<Operation> ExternalSearcher::on_validation(RequestId trial, int64_t step,
                                                       double value) {
  return operations(validation_event(trial, step, value));
}

std::vector<Operation> ExternalSearcher::on_evaluation(RequestId trial, int64_t step,
                                                       const Evaluation& e) {
  json event = validation_event(trial, step, e.value);
  if (spec_.searcher.goals.multi()) {
    // Non-finite values are kept, as strings: a diverged trial's worst values order it last.
    json values = json::array();
    for (double v : e.values) values.push_back(json_number(v));
    event["values"] = std::move(values);
    event["violation"] = json_number(e.violation);
  }
  return operations(event);
}

std::vector<Operation> ExternalSearcher::on_trial_closed(RequestId trial) {
  return operations(trial_event("trial_closed", trial));
}

std::vector<Operation> ExternalSearcher::on_trial_failed(RequestId trial) {
  return operations(trial_event("trial_failed", trial));
}

std::optional<uint64_t> ExternalSearcher::most_trials() const {
  if (!spec_.searcher.max_trials) return std::nullopt;
  return static_cast<uint64_t>(*spec_.searcher.max_trials);
}

json ExternalSearcher::save() const {
  json state = final_state_.value_or(json());
  if (!final_state_)
    talk({{"event", "save"}}, [&](const Field& reply) {
      reply.check_keys({"state"});
      state = reply["state"].json();
    });
  return {{"state", state}, {"trials", trials_}, {"finished", final_state_.has_value()}};
}

void ExternalSearcher::load(const json& saved) {
  Field f(saved, "state");
  f.check_keys({"state", "trials", "finished"});
  Field trials = f["trials"];
  std::vector<Params> params;
  for (size_t i = 0, n = trials.items(0); i < n; ++i) {
    try {
      spec_.hyperparams(trials[i].json());
    } catch (const SpecError& e) {
      trials[i].fail(e.what());
    }
    params.push_back(trials[i].json());
  }
  bool finished = f["finished"].boolean();
  const json& state = f["state"].json();
  trials_ = std::move(params);
  if (finished) {
    process_.reset();
    final_state_ = state;
    return;
  }
  final_state_.reset();
  json event = study_event("load");
  event["state"] = state;
  talk(event, [](const Field& reply) {
    reply.check_keys({"ok"});
    if (!reply["ok"].boolean()) reply["ok"].fail("expected true");
  });
}

SearcherKind external_searcher_kind() {
  // The process reads every value when the spec has several objectives (the validation event's
  // "values"); whether it can use them is its author's business.
  return {{"command", "timeout_s"},
          [](const StudySpec& s) { return std::make_unique<ExternalSearcher>(s); },
          true};
}

}  // namespace hippo
