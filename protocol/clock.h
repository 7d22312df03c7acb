// Time as the master and workers measure it: a steady clock for intervals (timeouts, heartbeats,
// wall time), and the CPU time of the calling thread (the master's own cost per study).
#pragma once

#include <time.h>

#include <chrono>

namespace hippo {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Seconds since the Unix epoch (wall-clock time, for records that people read).
inline double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// CPU time of this thread: without the time it waits for a core while other processes on the
// same machine keep them busy.
inline double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

}  // namespace hippo
