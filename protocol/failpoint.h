// Fault injection for the tests that kill a process between two precise steps. With
// HIPPO_FAILPOINT="NAME:N" in its environment, a process dies at the N-th pass through the point
// named NAME, by SIGKILL (no destructor, no flush, no reply): exactly what a crash or an operator's
// kill -9 leaves. Without it, a failpoint is one comparison.
//
//   failpoint("master.after_commit");  // the master: an edit committed, its messages not yet sent
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
  };
  static Armed armed = [] {
    Armed a;
    const char* spec = std::getenv("HIPPO_FAILPOINT");
    if (!spec) return a;
    const std::string text = spec;
    const size_t colon = text.rfind(':');
    if (colon == std::string::npos) return a;
    a.name = text.substr(0, colon);
    a.remaining = std::strtol(text.c_str() + colon + 1, nullptr, 10);
    return a;
  }();
  if (armed.remaining <= 0 || armed.name != name) return;
  if (--armed.remaining == 0) ::kill(::getpid(), SIGKILL);
}

}  // namespace hippo::protocol
