// Time as the master and workers measure it: a steady clock for intervals (timeouts, heartbeats,
// wall time), and the CPU time of the calling thread (the master's own cost per study).
//
// A process may run on virtual time instead (`hippo simulate`, master/simulator.h): the
// simulator owns a number of seconds that it advances from event to event, and Clock::now() and
// unix_seconds() read it, so the real master code measures simulated seconds (a study's wall time,
// a job's start, a worker's silence). thread_cpu_seconds() stays real: it is the master's own cost.
// Only a single-threaded process switches, and back only once nothing holds a time point read
// in between.
#pragma once

#include <time.h>

#include <chrono>

namespace hippo {

namespace clock_internal {
// Seconds of virtual time, or null (real time). Set by use_virtual_time only.
inline const double* virtual_seconds = nullptr;
inline double virtual_epoch = 0;  // the Unix time that virtual second 0 stands for
}  // namespace clock_internal

// From now on this process reads `*seconds` (owned by the caller, who advances it) as its time;
// null: real time again.
inline void use_virtual_time(const double* seconds) {
  clock_internal::virtual_epoch =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  clock_internal::virtual_seconds = seconds;
}

// The steady clock, or the virtual one.
struct Clock {
  using duration = std::chrono::steady_clock::duration;
  using rep = duration::rep;
  using period = duration::period;
  using time_point = std::chrono::time_point<Clock>;
  static constexpr bool is_steady = true;
  static time_point now() noexcept {
    if (const double* v = clock_internal::virtual_seconds)
      return time_point(std::chrono::duration_cast<duration>(std::chrono::duration<double>(*v)));
    return time_point(std::chrono::steady_clock::now().time_since_epoch());
  }
};

inline double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Seconds since the Unix epoch (wall-clock time, for records that people read).
inline double unix_seconds() {
  if (const double* v = clock_internal::virtual_seconds) return clock_internal::virtual_epoch + *v;
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
