#include "worker/trainer_process.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "protocol/text.h"

namespace hippo::worker {
namespace {

constexpr size_t kStderrTailBytes = 2000;

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
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

}  // namespace

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "was killed by signal " + std::to_string(WTERMSIG(status));
  return "ended with wait status " + std::to_string(status);
}

TrainerProcess::TrainerProcess(const std::vector<std::string>& argv,
                               const std::vector<std::string>& env) {
  // Built before fork: the child may only call async-signal-safe code.
  std::vector<char*> args, envp;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  char** const child_env = env.empty() ? environ : envp.data();
  const pid_t parent = ::getpid();
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
    // A trainer outlives no worker (a long-lived one would wait for stages forever otherwise).
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the worker died before prctl took effect
    ::dup2(in[0], 0);                         // dup2 clears close-on-exec on the new descriptor
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    ::execvpe(args[0], args.data(), child_env);
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
  pid_ = pid;
  stderr_lines_.emplace("[trainer " + std::to_string(pid) + "] ");
  in_ = in[1];
  out_ = out[0];
  err_ = err[0];
  ::fcntl(in_, F_SETFL, O_NONBLOCK);  // input is written as the trainer reads it
  int e = 0;
  ssize_t n;
  do n = ::read(exec_error[0], &e, sizeof e);
  while (n < 0 && errno == EINTR);
  ::close(exec_error[0]);
  if (n == static_cast<ssize_t>(sizeof e)) {
    kill_group();
    for (int* fd : {&in_, &out_, &err_}) close_fd(*fd);
    throw TrainerError("external trainer: cannot run " + argv[0] + ": " + std::strerror(e));
  }
}

TrainerProcess::~TrainerProcess() {
  kill_group();
  for (int* fd : {&in_, &out_, &err_}) close_fd(*fd);
}

void TrainerProcess::kill_group() {
  if (pid_ <= 0 || reaped_) return;  // exited() killed the group before it reaped the trainer
  ::kill(-pid_, SIGKILL);            // the trainer and anything it started
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

void TrainerProcess::write(std::string text, bool close_after) {
  input_ = std::move(text);
  written_ = 0;
  close_after_input_ = close_after;
}

bool TrainerProcess::pump(int timeout_ms, const std::function<void(std::string_view)>& on_line) {
  if (out_ < 0 && err_ < 0) return false;
  pollfd fds[3];
  nfds_t n = 0;
  const bool input_left = in_ >= 0 && written_ < input_.size();
  if (input_left) fds[n++] = {in_, POLLOUT, 0};
  for (int fd : {out_, err_})
    if (fd >= 0) fds[n++] = {fd, POLLIN, 0};
  if (::poll(fds, n, timeout_ms) < 0 && errno != EINTR)
    throw error(std::string("poll failed: ") + std::strerror(errno));
  char buf[65536];
  for (nfds_t i = 0; i < n; ++i) {
    if (fds[i].revents == 0) continue;
    if (fds[i].fd == in_) {
      ssize_t w = write_to_pipe(in_, input_.data() + written_, input_.size() - written_);
      if (w > 0) written_ += static_cast<size_t>(w);
      // The trainer closed its stdin (its exit status or its silence will tell why).
      if (w < 0 && errno != EAGAIN && errno != EINTR) close_fd(in_);
      if (written_ == input_.size() && close_after_input_) close_fd(in_);
      continue;
    }
    ssize_t r = ::read(fds[i].fd, buf, sizeof buf);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r <= 0) {
      if (fds[i].fd == err_) log_stderr({}, /*ended=*/true);
      close_fd(fds[i].fd == out_ ? out_ : err_);
      continue;
    }
    if (fds[i].fd == err_) {
      // Passed on to the worker's log line by line, escaped and named (protocol/text.h), and
      // kept for error messages.
      log_stderr(std::string_view(buf, static_cast<size_t>(r)));
      stderr_tail_.append(buf, static_cast<size_t>(r));
      if (stderr_tail_.size() > kStderrTailBytes)
        stderr_tail_.erase(0, stderr_tail_.size() - kStderrTailBytes);
      continue;
    }
    pending_.append(buf, static_cast<size_t>(r));
    size_t start = 0, end;
    while ((end = pending_.find('\n', start)) != std::string::npos) {
      std::string_view text(pending_.data() + start, end - start);
      start = end + 1;
      if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
      if (!text.empty()) on_line(text);
    }
    pending_.erase(0, start);
    if (pending_.size() > kMaxLineBytes)
      throw error("an output line longer than " + std::to_string(kMaxLineBytes) + " bytes");
  }
  return out_ >= 0 || err_ >= 0;
}

std::string TrainerProcess::take_partial_line() {
  std::string rest;
  rest.swap(pending_);
  return rest;
}

bool TrainerProcess::exited() {
  if (reaped_ || pid_ <= 0) return true;
  siginfo_t info{};
  // Looked at without reaping, so that its process group is killed (anything it left behind)
  // while its id cannot yet be given to another process.
  if (::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) != 0 ||
      info.si_pid != pid_)
    return false;
  ::kill(-pid_, SIGKILL);
  int status = 0;
  pid_t r;
  do r = ::waitpid(pid_, &status, 0);
  while (r < 0 && errno == EINTR);
  status_ = status;
  reaped_ = true;
  return true;
}

void TrainerProcess::log_stderr(std::string_view bytes, bool ended) {
  const std::string lines = ended ? stderr_lines_->flush() : stderr_lines_->add(bytes);
  for (size_t done = 0; done < lines.size();) {
    const ssize_t n = ::write(2, lines.data() + done, lines.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the worker's own stderr is gone: nothing to tell it
    done += static_cast<size_t>(n);
  }
}

TrainerError TrainerProcess::error(const std::string& what, bool crashed) const {
  std::string message = "external trainer: " + what;
  std::string tail = stderr_tail_;
  while (!tail.empty() && (tail.back() == '\n' || tail.back() == ' ')) tail.pop_back();
  // Escaped as its log lines are: the message reaches the worker's log, the plan and terminals.
  if (!tail.empty()) message += "; its stderr ends with: " + protocol::printable(tail);
  return TrainerError(message, crashed);
}

}  // namespace hippo::worker
