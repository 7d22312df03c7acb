// The real `hippo` binary run as a user runs it, for the searcher tests that go end to end.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace hippo::testing {

struct Outcome {
  int status = -1;
  std::string output;  // stdout and stderr
};

inline Outcome hippo(const std::string& args) {
  std::string command = std::string(HIPPO_BINARY) + " " + args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return {};
  Outcome run;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, pipe)) > 0;) run.output.append(buf, n);
  int status = pclose(pipe);
  run.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

inline std::string last_line(const std::string& text) {
  size_t end = text.find_last_not_of('\n');
  size_t start = text.rfind('\n', end);
  return text.substr(start == std::string::npos ? 0 : start + 1, end - start);
}

}  // namespace hippo::testing
