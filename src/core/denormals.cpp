#include "lockstep/core/denormals.h"

#include <atomic>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define LOCKSTEP_HAS_MXCSR 1
#endif

namespace lockstep {

namespace {
std::atomic<bool> g_flush{true};
#ifdef LOCKSTEP_HAS_MXCSR
constexpr unsigned kFtzDaz = 0x8040;  // MXCSR: flush-to-zero (bit 15), denormals-are-zero (bit 6)
#endif
}  // namespace

bool set_flush_denormal(bool on) {
#ifdef LOCKSTEP_HAS_MXCSR
  g_flush.store(on, std::memory_order_relaxed);
  return true;
#else
  (void)on;
  return false;
#endif
}

bool flush_denormal() {
#ifdef LOCKSTEP_HAS_MXCSR
  return g_flush.load(std::memory_order_relaxed);
#else
  return false;
#endif
}

ScopedFlushDenormal::ScopedFlushDenormal() {
#ifdef LOCKSTEP_HAS_MXCSR
  saved_ = _mm_getcsr();
  const unsigned want = flush_denormal() ? (saved_ | kFtzDaz) : (saved_ & ~kFtzDaz);
  if (want != saved_) {
    _mm_setcsr(want);
    changed_ = true;
  }
#endif
}

ScopedFlushDenormal::~ScopedFlushDenormal() {
#ifdef LOCKSTEP_HAS_MXCSR
  if (changed_) _mm_setcsr(saved_);
#endif
}

}  // namespace lockstep
