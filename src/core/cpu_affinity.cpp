#include "core/cpu_affinity.h"

#include <mutex>

namespace lockstep::os {
namespace {

struct StartMask {
  std::mutex mu;
  const void* owner = nullptr;
  cpu_set_t mask{};
};

StartMask& start_mask() {
  static StartMask s;
  return s;
}

}  // namespace

void register_thread_start_mask(const void* owner, const cpu_set_t& mask) {
  StartMask& s = start_mask();
  std::lock_guard lock(s.mu);
  if (s.owner != nullptr) return;
  s.owner = owner;
  s.mask = mask;
}

void unregister_thread_start_mask(const void* owner) {
  StartMask& s = start_mask();
  std::lock_guard lock(s.mu);
  if (s.owner == owner) s.owner = nullptr;
}

void adopt_thread_start_mask() {
  StartMask& s = start_mask();
  cpu_set_t want;
  {
    std::lock_guard lock(s.mu);
    if (s.owner == nullptr) return;
    want = s.mask;
  }
  sched_setaffinity(0, sizeof want, &want);  // a thread that may not move keeps its mask
}

}  // namespace lockstep::os
