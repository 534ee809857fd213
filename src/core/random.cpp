#include "lockstep/core/random.h"
#include "lockstep/core/check.h"

#include <cmath>
#include <numbers>

namespace lockstep {

std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  constexpr uint32_t kM0 = 0xD2511F53, kM1 = 0xCD9E8D57;
  constexpr uint32_t kW0 = 0x9E3779B9, kW1 = 0xBB67AE85;
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = uint64_t{kM0} * c[0];
    uint64_t p1 = uint64_t{kM1} * c[2];
    uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
    k[0] += kW0;
    k[1] += kW1;
  }
  return c;
}

Generator::Generator(uint64_t seed, uint64_t stream) : seed_(seed), stream_(stream) {}

void Generator::refill() {
  block_ = philox4x32_10({static_cast<uint32_t>(counter_), static_cast<uint32_t>(counter_ >> 32),
                          static_cast<uint32_t>(stream_), static_cast<uint32_t>(stream_ >> 32)},
                         {static_cast<uint32_t>(seed_), static_cast<uint32_t>(seed_ >> 32)});
  ++counter_;
  used_ = 0;
}

uint32_t Generator::next_u32() {
  if (used_ == 4) refill();
  return block_[used_++];
}

uint64_t Generator::next_u64() {
  uint64_t hi = next_u32();
  return (hi << 32) | next_u32();
}

float Generator::uniform() {
  return static_cast<float>(next_u32() >> 8) * 0x1.0p-24f;
}

double Generator::uniform_double() {
  return static_cast<double>(next_u64() >> 11) * 0x1.0p-53;
}

double Generator::normal() {
  // 1 - u keeps the argument of log in (0, 1].
  double u1 = 1.0 - uniform_double();
  double u2 = uniform_double();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

uint64_t Generator::uniform_int(uint64_t n) {
  LOCKSTEP_CHECK(n != 0, "uniform_int: n must be positive.");
  // Rejection sampling removes the modulo bias: draws at or above the largest multiple of n are
  // redrawn. That limit is above UINT64_MAX - n, so it is computed (a second division) only for
  // the rare draw above that.
  uint64_t r = next_u64();
  while (r > UINT64_MAX - n && r >= UINT64_MAX - UINT64_MAX % n) r = next_u64();
  return r % n;
}

namespace {
template <typename F>
Tensor fill(const Shape& shape, DType dtype, const char* what, F&& draw) {
  LOCKSTEP_CHECK(is_floating(dtype), what,
                 ": expected a floating dtype. Received: ", dtype_name(dtype), ".");
  Tensor t(shape, dtype);
  int64_t n = t.num_elements();
  if (dtype == DType::float32) {
    float* d = t.data<float>();
    for (int64_t i = 0; i < n; ++i) d[i] = static_cast<float>(draw());
  } else if (dtype == DType::float64) {
    double* d = t.data<double>();
    for (int64_t i = 0; i < n; ++i) d[i] = draw();
  } else {
    bfloat16* d = t.data<bfloat16>();
    for (int64_t i = 0; i < n; ++i) d[i] = bfloat16(static_cast<float>(draw()));
  }
  return t;
}
}  // namespace

Tensor Generator::uniform(const Shape& shape, double minval, double maxval, DType dtype) {
  return fill(shape, dtype, "Generator::uniform",
              [&] { return minval + (maxval - minval) * uniform_double(); });
}

Tensor Generator::normal(const Shape& shape, double mean, double stddev, DType dtype) {
  return fill(shape, dtype, "Generator::normal", [&] { return mean + stddev * normal(); });
}

Tensor Generator::truncated_normal(const Shape& shape, double mean, double stddev, DType dtype) {
  return fill(shape, dtype, "Generator::truncated_normal", [&] {
    double z;
    do z = normal();
    while (std::abs(z) > 2.0);
    return mean + stddev * z;
  });
}

Generator::State Generator::state() const {
  return {seed_, stream_, counter_, used_ == 4 ? 0u : used_};
}

void Generator::set_state(const State& s) {
  seed_ = s.seed;
  stream_ = s.stream;
  if (s.buffered == 0) {
    counter_ = s.counter;
    used_ = 4;
  } else {
    counter_ = s.counter - 1;
    refill();
    used_ = s.buffered;
  }
}

}  // namespace lockstep
