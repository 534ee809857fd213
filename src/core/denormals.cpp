#include "lockstep/core/denormals.h"

#include <atomic>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define LOCKSTEP_HAS_FLUSH_MODE 1
#elif defined(__aarch64__)
#define LOCKSTEP_HAS_FLUSH_MODE 1
#endif

namespace lockstep {

namespace {
std::atomic<bool> g_flush{true};
#if defined(__x86_64__) || defined(__i386__)
constexpr unsigned kFtzDaz = 0x8040;  // MXCSR: flush-to-zero (bit 15), denormals-are-zero (bit 6)
unsigned read_mode() {
  return _mm_getcsr();
}
void write_mode(unsigned mode) {
  _mm_setcsr(mode);
}
#elif defined(__aarch64__)
// FPCR.FZ (bit 24) flushes subnormal inputs and results alike, for scalar and Advanced SIMD
// single- and double-precision arithmetic: FTZ and DAZ in one bit.
constexpr unsigned kFtzDaz = 1u << 24;
unsigned read_mode() {
  return __builtin_aarch64_get_fpcr();
}
void write_mode(unsigned mode) {
  __builtin_aarch64_set_fpcr(mode);
}
#endif
}  // namespace

bool set_flush_denormal(bool on) {
#ifdef LOCKSTEP_HAS_FLUSH_MODE
  g_flush.store(on, std::memory_order_relaxed);
  return true;
#else
  (void)on;
  return false;
#endif
}

bool flush_denormal() {
#ifdef LOCKSTEP_HAS_FLUSH_MODE
  return g_flush.load(std::memory_order_relaxed);
#else
  return false;
#endif
}

ScopedFlushDenormal::ScopedFlushDenormal() {
#ifdef LOCKSTEP_HAS_FLUSH_MODE
  saved_ = read_mode();
  const unsigned want = flush_denormal() ? (saved_ | kFtzDaz) : (saved_ & ~kFtzDaz);
  if (want != saved_) {
    write_mode(want);
    changed_ = true;
  }
#endif
}

ScopedFlushDenormal::~ScopedFlushDenormal() {
#ifdef LOCKSTEP_HAS_FLUSH_MODE
  if (changed_) write_mode(saved_);
#endif
}

}  // namespace lockstep
