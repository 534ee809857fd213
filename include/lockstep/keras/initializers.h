#pragma once
// Weight initializers with Keras' definitions (keras.initializers). For a kernel of shape
// [..., fan_in_dim, fan_out_dim], fan_in = prod(shape[:-1]) and fan_out = prod(shape[:-2]) *
// shape[-1] (receptive field times channels, as Keras computes for conv kernels).
//
//   GlorotUniform: U(-l, l), l = sqrt(6 / (fan_in + fan_out))       (Keras' default kernel)
//   GlorotNormal:  truncated N(0, s), s = sqrt(2 / (fan_in + fan_out)) / .87962566103423978
//   HeUniform / HeNormal: same with scale 2 / fan_in; LecunUniform / LecunNormal: 1 / fan_in
//   Zeros, Ones, Constant(v)
//
// Random draws come from a Philox generator seeded by set_random_seed (default 0), consumed in
// the order weights are created, so the same program gives the same weights run after run.
#include <cstdint>
#include <memory>
#include <string>

#include "lockstep/core/random.h"
#include "lockstep/core/tensor.h"

namespace lockstep::keras {

// keras.utils.set_random_seed: reseeds the generator used by initializers and dropout.
void set_random_seed(uint64_t seed);
// The next seed drawn from the global generator (each layer takes one for its own streams).
uint64_t next_seed();
// The global generator's whole state, and its restoration: BackupAndRestore saves it so that a
// resumed run continues the same sequence as the uninterrupted one.
Generator::State random_generator_state();
void set_random_generator_state(const Generator::State& state);

namespace initializers {

class Initializer {
 public:
  virtual ~Initializer() = default;
  virtual Tensor operator()(const Shape& shape, DType dtype = DType::float32) const = 0;
  virtual std::string name() const = 0;
};

enum class Distribution { uniform, truncated_normal };

class VarianceScaling : public Initializer {
 public:
  enum class Mode { fan_in, fan_out, fan_avg };
  VarianceScaling(double scale, Mode mode, Distribution distribution, std::string name);
  Tensor operator()(const Shape& shape, DType dtype = DType::float32) const override;
  std::string name() const override { return name_; }

 private:
  double scale_;
  Mode mode_;
  Distribution distribution_;
  std::string name_;
};

class GlorotUniform : public VarianceScaling {
 public:
  GlorotUniform() : VarianceScaling(1.0, Mode::fan_avg, Distribution::uniform, "glorot_uniform") {}
};
class GlorotNormal : public VarianceScaling {
 public:
  GlorotNormal()
      : VarianceScaling(1.0, Mode::fan_avg, Distribution::truncated_normal, "glorot_normal") {}
};
class HeUniform : public VarianceScaling {
 public:
  HeUniform() : VarianceScaling(2.0, Mode::fan_in, Distribution::uniform, "he_uniform") {}
};
class HeNormal : public VarianceScaling {
 public:
  HeNormal() : VarianceScaling(2.0, Mode::fan_in, Distribution::truncated_normal, "he_normal") {}
};
class LecunUniform : public VarianceScaling {
 public:
  LecunUniform() : VarianceScaling(1.0, Mode::fan_in, Distribution::uniform, "lecun_uniform") {}
};
class LecunNormal : public VarianceScaling {
 public:
  LecunNormal()
      : VarianceScaling(1.0, Mode::fan_in, Distribution::truncated_normal, "lecun_normal") {}
};

class Constant : public Initializer {
 public:
  explicit Constant(double value, std::string name = "constant")
      : value_(value), name_(std::move(name)) {}
  Tensor operator()(const Shape& shape, DType dtype = DType::float32) const override {
    return Tensor::full(shape, value_, dtype);
  }
  std::string name() const override { return name_; }
  double value() const { return value_; }

 private:
  double value_;
  std::string name_;
};
class Zeros : public Constant {
 public:
  Zeros() : Constant(0.0, "zeros") {}
};
class Ones : public Constant {
 public:
  Ones() : Constant(1.0, "ones") {}
};

// Fans of a weight shape, as Keras computes them.
std::pair<double, double> compute_fans(const Shape& shape);
// "glorot_uniform", "he_normal", "zeros", ...; throws InvalidArgument for unknown names.
std::shared_ptr<Initializer> get(const std::string& name);

}  // namespace initializers
}  // namespace lockstep::keras
