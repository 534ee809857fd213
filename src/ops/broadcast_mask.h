#pragma once
// Internal to the ops layer: a keep/drop mask broadcast against a tensor's shape (NumPy rules),
// as masked_softmax and dot_product_attention take it.
#include <array>
#include <cstdint>

#include "lockstep/core/tensor.h"

namespace lockstep::ops::detail {

struct BroadcastMask {
  Tensor keep;  // uint8 copy of the mask, 1 = keep (any nonzero value of the mask's dtype)
  // Element offsets into `keep` per dimension of the target shape; 0 along broadcast dimensions.
  std::array<int64_t, Shape::kMaxRank> strides{};

  const uint8_t* data() const { return keep.data<uint8_t>(); }
};

// Throws InvalidArgument naming `op` when `mask` does not broadcast to `shape` (each of its
// dimensions, aligned from the right, equal or 1; rank at most shape's).
BroadcastMask broadcast_mask(const Tensor& mask, const Shape& shape, const char* op);

}  // namespace lockstep::ops::detail
