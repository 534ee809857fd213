#pragma once
// Counter-based random numbers: Philox 4x32-10 (Salmon et al., "Parallel random numbers: as easy
// as 1, 2, 3", SC'11), the generator behind TensorFlow's stateless random ops and JAX's PRNG.
// Output depends only on (seed, counter), so a replica, a data-pipeline worker or a resumed job can
// reproduce any part of a stream without replaying it: the state is two integers.
#include <array>
#include <cstdint>

#include "lockstep/core/tensor.h"

namespace lockstep {

// One Philox 4x32-10 block: 4 random 32-bit words from a 128-bit counter and a 64-bit key.
std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

class Generator {
 public:
  // `stream` separates independent sequences with the same seed (e.g. one per replica).
  explicit Generator(uint64_t seed = 0, uint64_t stream = 0);

  uint32_t next_u32();
  uint64_t next_u64();
  // Uniform in [0, 1), with 24 random bits (every float32 in the range is reachable on a grid).
  float uniform();
  double uniform_double();  // [0, 1), 53 random bits
  // Standard normal (Box-Muller).
  double normal();
  // Uniform integer in [0, n), unbiased.
  uint64_t uniform_int(uint64_t n);

  // Tensors of float32 / float64 / bfloat16.
  Tensor uniform(const Shape& shape, double minval, double maxval, DType dtype = DType::float32);
  Tensor normal(const Shape& shape, double mean, double stddev, DType dtype = DType::float32);
  // Normal, redrawn when more than two standard deviations from the mean (Keras' definition).
  Tensor truncated_normal(const Shape& shape, double mean, double stddev,
                          DType dtype = DType::float32);

  // The whole state, for checkpoints: restoring it continues the same sequence.
  struct State {
    uint64_t seed = 0;
    uint64_t stream = 0;
    uint64_t counter = 0;   // blocks consumed
    uint32_t buffered = 0;  // words of the current block already used (0..4)
  };
  State state() const;
  void set_state(const State& s);

 private:
  void refill();
  uint64_t seed_, stream_, counter_ = 0;
  std::array<uint32_t, 4> block_{};
  uint32_t used_ = 4;
};

}  // namespace lockstep
