// `delete` against `resume` (issue 43, part 4), each interleaving played the same way every time:
// a process is held by a failpoint (protocol/failpoint.h, "NAME:1:stop") at the exact point
// between its read of the study and its write, the other acts, and then it goes on. A study a
// running master holds is never deleted, and a deleted study is never resumed (it used to end
// `done|deleted`, its trials unreachable by name while it ran).
#include <sys/wait.h>

#include <csignal>

#include "tests/e2e/e2e_helper.h"

namespace hippo::e2e {
namespace {

class Race : public E2ETest {
 protected:
  std::string log_path(pid_t pid) const { return path("process-" + std::to_string(pid) + ".log"); }
  // Starts `args` with the failpoint `point` armed to stop it there.
  pid_t spawn_armed(const std::vector<std::string>& args, const std::string& point) {
    const std::string armed = point + ":1:stop";
    return spawn(args, [&] { setenv("HIPPO_FAILPOINT", armed.c_str(), 1); });
  }
  // Waits until the process is held at its failpoint.
  void wait_held(pid_t pid) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, WUNTRACED), pid);
    ASSERT_TRUE(WIFSTOPPED(status)) << read_file(log_path(pid));
  }
  json study_row(const std::string& name) {
    return json::parse(sh("sqlite3 -json " + path("plan.db") +
                          " \"SELECT status, deleted_at FROM studies WHERE name = '" + name + "'\"")
                           .out)[0];
  }
};

TEST_F(Race, DeleteAndResumeNeverBothWin) {
  // An interrupted study: a run stopped by Ctrl-C once it measured something.
  const std::string spec_file =
      spec("life", {{"model", {{"hidden", {128}}}},
                    {"data", {{"train_samples", 8192}, {"eval_samples", 512}}},
                    {"length", {{"epochs", 4}}}});
  const std::string db = path("plan.db");
  const pid_t run = spawn({kHippo, "--db", db, "run", spec_file, "--workers", "1"});
  wait_for_a_metric(db, "life");
  kill(run, SIGINT);
  ASSERT_EQ(exit_status_within(run, 30), 1) << read_file(log_path(run));
  ASSERT_EQ(study_row("life")["status"], "interrupted");

  // A master resumes it while a `hippo delete` that read it interrupted is held: the master is
  // held too, inside the transaction where it read the study; the delete goes on first (and
  // waits for the master's write lock), then the master. The study runs; the delete is refused.
  const std::string address = "tcp://127.0.0.1:" + std::to_string(free_port());
  const pid_t master =
      spawn_armed({kHippo, "--db", db, "master", "--bind", address}, "master.resume_read");
  ASSERT_TRUE(appears(log_path(master), "listening on")) << read_file(log_path(master));
  const pid_t del = spawn_armed({kHippo, "--db", db, "delete", "life"}, "delete.read");
  wait_held(del);
  const pid_t resume = spawn({kHippo, "--master", address, "resume", "life"});
  wait_held(master);
  kill(del, SIGCONT);
  kill(master, SIGCONT);
  EXPECT_EQ(exit_status_within(resume, 30), 0) << read_file(log_path(resume));
  EXPECT_EQ(exit_status_within(del, 30), 2) << read_file(log_path(del));
  EXPECT_NE(read_file(log_path(del)).find("life is running: cancel it first"), std::string::npos)
      << read_file(log_path(del));
  json row = study_row("life");
  EXPECT_EQ(row["status"], "running");
  EXPECT_TRUE(row["deleted_at"].is_null());
  EXPECT_EQ(sh(hippo("plan.db") + "trials life >/dev/null").status, 0);

  // The master stops (the study stays `running`, as after a crash). A local `hippo resume`
  // interrupts it at its start, reads it and is held; a delete of the interrupted study wins;
  // the resume, let go, refuses the deleted study and runs nothing.
  kill(master, SIGTERM);
  ASSERT_GE(exit_status_within(master, 30), 0);
  const pid_t local =
      spawn_armed({kHippo, "--db", db, "resume", "life", "--workers", "1"}, "resume.read");
  wait_held(local);
  Result deleted = sh(hippo("plan.db") + "delete life 2>&1");
  EXPECT_EQ(deleted.status, 0) << deleted.out;
  kill(local, SIGCONT);
  EXPECT_EQ(exit_status_within(local, 30), 2) << read_file(log_path(local));
  EXPECT_NE(read_file(log_path(local)).find("no study"), std::string::npos)
      << read_file(log_path(local));
  row = study_row("life");
  EXPECT_EQ(row["status"], "interrupted");
  EXPECT_FALSE(row["deleted_at"].is_null());
  Result trials = sh(hippo("plan.db") + "trials life 2>&1");
  EXPECT_EQ(trials.status, 2);
  EXPECT_NE(trials.out.find("no study named life"), std::string::npos) << trials.out;
}

}  // namespace
}  // namespace hippo::e2e
