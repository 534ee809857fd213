#pragma once
// Small pieces for moving threads between CPUs (the task pool's helpers, the ranks of one host).
// Internal (core); used by the distribute and data layers.
#include <sched.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

namespace lockstep::os {

// The calling thread's kernel id (what sched_setaffinity and /proc/<pid>/task/ take).
inline pid_t this_thread_id() {
  thread_local const auto tid = static_cast<pid_t>(syscall(SYS_gettid));
  return tid;
}

// `mask` without `cpu` into `out`; false when nothing is left (the thread could not go elsewhere).
inline bool mask_without(const cpu_set_t& mask, int cpu, cpu_set_t& out) {
  out = mask;
  CPU_CLR(cpu, &out);
  return CPU_COUNT(&out) > 0;
}

// The mask a thread that Lockstep starts runs on, when set. A new thread inherits the mask of the
// thread that starts it, and a rank's thread may be narrowed to one CPU by a peer for a while
// (HostRankPlacement), which a thread started in that window would keep for good. The first
// registration wins; `owner` clears it.
void register_thread_start_mask(const void* owner, const cpu_set_t& mask);
void unregister_thread_start_mask(const void* owner);
// Called first on a thread Lockstep starts: takes the registered mask, if any.
void adopt_thread_start_mask();

}  // namespace lockstep::os
