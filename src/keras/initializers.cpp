#include "lockstep/keras/initializers.h"

#include <cmath>
#include <mutex>

namespace lockstep::keras {

namespace {
std::mutex seed_mu;
Generator& global_generator() {
  static Generator g(0);
  return g;
}
}  // namespace

void set_random_seed(uint64_t seed) {
  std::lock_guard lock(seed_mu);
  global_generator() = Generator(seed);
}

uint64_t next_seed() {
  std::lock_guard lock(seed_mu);
  return global_generator().next_u64();
}

Generator::State random_generator_state() {
  std::lock_guard lock(seed_mu);
  return global_generator().state();
}

void set_random_generator_state(const Generator::State& state) {
  std::lock_guard lock(seed_mu);
  global_generator().set_state(state);
}

namespace initializers {

std::pair<double, double> compute_fans(const Shape& shape) {
  if (shape.rank() == 0) return {1, 1};
  if (shape.rank() == 1) return {double(shape[0]), double(shape[0])};
  if (shape.rank() == 2) return {double(shape[0]), double(shape[1])};
  double receptive = 1;
  for (int i = 0; i < shape.rank() - 2; ++i) receptive *= double(shape[i]);
  return {receptive * double(shape[shape.rank() - 2]), receptive * double(shape[shape.rank() - 1])};
}

VarianceScaling::VarianceScaling(double scale, Mode mode, Distribution distribution,
                                 std::string name)
    : scale_(scale), mode_(mode), distribution_(distribution), name_(std::move(name)) {}

Tensor VarianceScaling::operator()(const Shape& shape, DType dtype) const {
  auto [fan_in, fan_out] = compute_fans(shape);
  double fan = mode_ == Mode::fan_in    ? fan_in
               : mode_ == Mode::fan_out ? fan_out
                                        : (fan_in + fan_out) / 2;
  double scale = scale_ / std::max(1.0, fan);
  Generator g(next_seed());
  if (distribution_ == Distribution::uniform) {
    double limit = std::sqrt(3.0 * scale);
    return g.uniform(shape, -limit, limit, dtype);
  }
  // The constant is the stddev of a unit normal truncated to [-2, 2]: dividing by it restores the
  // requested variance after truncation (Keras does the same).
  double stddev = std::sqrt(scale) / 0.87962566103423978;
  return g.truncated_normal(shape, 0.0, stddev, dtype);
}

std::shared_ptr<Initializer> get(const std::string& name) {
  if (name == "glorot_uniform") return std::make_shared<GlorotUniform>();
  if (name == "glorot_normal") return std::make_shared<GlorotNormal>();
  if (name == "he_uniform") return std::make_shared<HeUniform>();
  if (name == "he_normal") return std::make_shared<HeNormal>();
  if (name == "lecun_uniform") return std::make_shared<LecunUniform>();
  if (name == "lecun_normal") return std::make_shared<LecunNormal>();
  if (name == "zeros") return std::make_shared<Zeros>();
  if (name == "ones") return std::make_shared<Ones>();
  throw InvalidArgument("Unknown initializer '" + name +
                        "'. Expected one of glorot_uniform, glorot_normal, he_uniform, he_normal, "
                        "lecun_uniform, lecun_normal, zeros, ones.");
}

}  // namespace initializers
}  // namespace lockstep::keras
