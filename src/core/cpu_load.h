#pragma once
// How busy the machine is, for deciding whether a waiting thread may spin: spinning pays only
// when every runnable thread has a core (this process's threads: available_core_count(),
// core/cpu_cores.h; other ranks': online_cpu_count()); otherwise the spin takes the time a
// descheduled peer (a replica task, another rank) needs. Internal (core); used by the distribute
// layer.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace lockstep::os {

// Runnable threads on the whole machine (the caller included), from /proc/stat; -1 when unknown.
inline int procs_running() {
  FILE* f = std::fopen("/proc/stat", "r");
  if (f == nullptr) return -1;
  char line[256];
  int n = -1;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::strncmp(line, "procs_running ", 14) == 0) {
      n = std::atoi(line + 14);
      break;
    }
  }
  std::fclose(f);
  return n;
}

// The machine's online CPUs, what procs_running() is to be compared with when the threads that
// matter belong to other processes too (at least 1).
inline int online_cpu_count() {
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

}  // namespace lockstep::os
