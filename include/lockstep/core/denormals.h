#pragma once
// Subnormal ("denormal") floats in the training step: flushed to zero, as TensorFlow does on CPUs.
//
// Adam's moments of a weight whose gradient is mostly zero (an input pixel that is rarely lit)
// decay by beta_1 every step into the subnormal range, and x86 cores take a microcode assist for
// every vector instruction that meets one, which made the optimizer's update several times slower
// (docs/performance.md, "Measured design choices"). Flushing (FTZ: subnormal results become zero;
// DAZ: subnormal inputs read as zero) changes only values below 2^-126 ≈ 1.2e-38. TensorFlow
// flushes in every op it runs on CPU; PyTorch leaves it off unless torch.set_flush_denormal(True).
// Lockstep follows TensorFlow, whose Keras numerics it keeps: on by default, for the threads that
// run a strategy's steps (ScopedFlushDenormal around every task and replica function); the caller's
// own floating-point mode is restored when they return.
namespace lockstep {

// Process-wide; PyTorch's name. Returns false (and changes nothing) where the CPU has no such
// mode (handled: x86-64's SSE/AVX control register MXCSR, aarch64's FPCR).
bool set_flush_denormal(bool on);
bool flush_denormal();

// Applies flush_denormal() to this thread's floating-point mode for its lifetime, then restores
// the mode it found.
class ScopedFlushDenormal {
 public:
  ScopedFlushDenormal();
  ~ScopedFlushDenormal();
  ScopedFlushDenormal(const ScopedFlushDenormal&) = delete;
  ScopedFlushDenormal& operator=(const ScopedFlushDenormal&) = delete;

 private:
  unsigned saved_ = 0;
  bool changed_ = false;
};

}  // namespace lockstep
