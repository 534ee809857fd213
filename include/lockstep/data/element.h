#pragma once
// Elements of a Dataset and their static description (the `element_spec` of tf.data).
//
// An element is a tuple of tensors: `(x, y)` for supervised data. Components are positional; zip
// concatenates tuples, batch stacks each component along a new leading axis.
#include <cstdint>
#include <string>
#include <vector>

#include "lockstep/core/dtype.h"
#include "lockstep/core/tensor.h"

namespace lockstep {

using Element = std::vector<Tensor>;

// Shape and dtype of one component. A dimension of -1 is unknown (the batch dimension of a batch
// that may be partial, or anything a map function decides at run time).
struct TensorSpec {
  static constexpr int64_t kUnknownDim = -1;
  std::vector<int64_t> shape;
  DType dtype = DType::float32;

  // Spec of a concrete tensor (every dimension known).
  static TensorSpec of(const Tensor& t);
  // True when `t` has this dtype and rank and agrees with every known dimension.
  bool is_compatible_with(const Tensor& t) const;
  // "uint8[?, 28, 28]".
  std::string to_string() const;
  friend bool operator==(const TensorSpec&, const TensorSpec&) = default;
};

using ElementSpec = std::vector<TensorSpec>;

ElementSpec element_spec_of(const Element& element);
// "(uint8[?, 28, 28], uint8[?])".
std::string to_string(const ElementSpec& spec);
// "(uint8[28, 28], uint8[])": the shapes of a concrete element, for error messages.
std::string describe(const Element& element);

}  // namespace lockstep
