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

bool adopt_thread_start_mask() {
  StartMask& s = start_mask();
  cpu_set_t want;
  {
    std::lock_guard lock(s.mu);
    if (s.owner == nullptr) return false;
    want = s.mask;
  }
  cpu_set_t now;
  CPU_ZERO(&now);
  if (sched_getaffinity(0, sizeof now, &now) != 0 || CPU_EQUAL(&now, &want)) return false;
  return sched_setaffinity(0, sizeof want, &want) == 0;
}

}  // namespace lockstep::os
