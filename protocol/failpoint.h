// Fault injection for the tests that kill a process between two precise steps. With
// HIPPO_FAILPOINT="NAME:N" in its environment, a process dies at the N-th pass through the point
// named NAME, by SIGKILL (no destructor, no flush, no reply): exactly what a crash or an operator's
// kill -9 leaves. With "NAME:N:stop" it stops instead (SIGSTOP): a test that waits for the stop
// (waitpid with WUNTRACED) acts while the process is held at that exact point, then lets it go on
// (SIGCONT), so that a race between two processes is played in one order every time, with no
// sleep. Without it, a failpoint is one comparison.
//
//   failpoint("master.after_commit");  // the master: an edit committed, its messages not yet sent
//   failpoint("delete.read");          // `hippo delete`: the study read, not yet deleted
#pragma once

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace hippo::protocol {

inline void failpoint(const char* name) {
  struct Armed {
    std::string name;
    long remaining = 0;  // passes left before the kill; 0: disarmed
    int signal = SIGKILL;
  };
  static Armed armed = [] {
    Armed a;
    const char* spec = std::getenv("HIPPO_FAILPOINT");
    if (!spec) return a;
    std::string text = spec;
    if (const size_t stop = text.rfind(":stop");
        stop != std::string::npos && stop + 5 == text.size()) {
      a.signal = SIGSTOP;
      text.resize(stop);
    }
    const size_t colon = text.rfind(':');
    if (colon == std::string::npos) return a;
    a.name = text.substr(0, colon);
    a.remaining = std::strtol(text.c_str() + colon + 1, nullptr, 10);
    return a;
  }();
  if (armed.remaining <= 0 || armed.name != name) return;
  if (--armed.remaining == 0) ::kill(::getpid(), armed.signal);
}

}  // namespace hippo::protocol
