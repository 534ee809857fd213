#pragma once
// Tensor: a handle to a dense, row-major (C-order) array with a shape and a dtype.
//
// Copying a Tensor copies the handle, not the data (like torch::Tensor / tf.Tensor handles);
// `clone()` copies the data. Storage is 64-byte aligned and pooled (see storage.h). Tensors are
// always contiguous: `reshape` and `slice` along axis 0 are views that share storage; anything
// else that rearranges elements (transpose) produces a new tensor.
//
// Each handle carries an `id()`: views and new tensors get fresh ids, copies of a handle keep it.
// The gradient tape uses it to know which tensor an op consumed.
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "lockstep/core/check.h"
#include "lockstep/core/dtype.h"
#include "lockstep/core/error.h"
#include "lockstep/core/shape.h"
#include "lockstep/core/storage.h"

namespace lockstep {

class Tensor {
 public:
  Tensor() = default;
  // Uninitialised contents (the fast path for outputs that are fully overwritten).
  Tensor(const Shape& shape, DType dtype = DType::float32);
  ~Tensor() { reset(); }
  Tensor(const Tensor& other);
  Tensor(Tensor&& other) noexcept;
  Tensor& operator=(const Tensor& other);
  Tensor& operator=(Tensor&& other) noexcept;

  static Tensor empty(const Shape& shape, DType dtype = DType::float32) { return {shape, dtype}; }
  static Tensor zeros(const Shape& shape, DType dtype = DType::float32);
  static Tensor ones(const Shape& shape, DType dtype = DType::float32);
  // Fills with `value` converted to `dtype`.
  static Tensor full(const Shape& shape, double value, DType dtype = DType::float32);
  static Tensor scalar(double value, DType dtype = DType::float32) {
    return full({}, value, dtype);
  }
  // Copies `values` (whose length must equal shape.num_elements()).
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape);
  template <typename T>
  static Tensor from_span(std::span<const T> values, const Shape& shape);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int rank() const { return shape_.rank(); }
  int64_t dim(int axis) const { return shape_.dim(axis); }
  DType dtype() const { return dtype_; }
  int64_t num_elements() const { return shape_.num_elements(); }
  size_t nbytes() const { return static_cast<size_t>(num_elements()) * dtype_size(dtype_); }
  uint64_t id() const { return id_; }

  // Typed access; throws InvalidArgument if T does not match dtype(). Handles share data, so
  // const-ness of the handle does not make the elements read-only (as with torch::Tensor).
  template <typename T>
  T* data() const {
    check_dtype(dtype_v<T>, "data<T>()");
    return static_cast<T*>(raw_data());
  }
  void* raw_data() const;
  // Exchanges the data this handle and `other` refer to; shapes, dtypes and ids stay with their
  // handles (shapes and dtypes must match). Other handles are unaffected. For double-buffered
  // state that must keep its identity (a variable's two buffers, autodiff/variable.h).
  void swap_storage(Tensor& other);
  // Whether this float32 tensor's memory block is marked as holding bfloat16 values only
  // (Storage::holds_bfloat16_values), and the mark. Mark only a block you filled entirely with
  // rounded values (round_to_bfloat16_values) and that nothing writes other values into later;
  // copy_from and the in-place arithmetic (ops::add_into) clear it.
  bool holds_bfloat16_values() const;
  void mark_bfloat16_values() const;
  void clear_bfloat16_values() const;
  // A matrix that can carry a dense copy of its transpose in the same memory block, for a
  // producer whose consumer multiplies it transposed (a layer's input, read as xᵀ by its kernel's
  // gradient xᵀ·dz). `with_room_for_transpose` returns the [rows, cols] matrix (contents
  // unspecified); `transpose_room` the [cols, rows] tensor behind it, to fill;
  // `mark_transposed_copy` says both are written (the room holds the matrix's transpose, element
  // for element), and `transposed_copy` returns that tensor while the mark holds and this handle is
  // the whole matrix — otherwise an undefined Tensor, and the consumer reads the matrix itself.
  // Mark only what you filled and nothing rewrites later; copy_from and the in-place arithmetic
  // (ops::add_into) clear the mark.
  static Tensor with_room_for_transpose(int64_t rows, int64_t cols, DType dtype);
  Tensor transpose_room() const;
  void mark_transposed_copy() const;
  Tensor transposed_copy() const;
  void clear_transposed_copy() const;
  // True when this handle is the only one referring to its memory block (no view, no copy of the
  // handle, no tape keeping it): its contents may then be rewritten in place.
  bool sole_handle() const { return storage_ != nullptr && storage_->unshared(); }
  // True when both handles see the same memory block.
  bool shares_storage_with(const Tensor& other) const { return storage_ == other.storage_; }

  // Views (no copy). The braced form accepts one -1 dimension, inferred from the element count:
  // `x.reshape({-1, 784})`.
  Tensor reshape(const Shape& shape) const;
  Tensor reshape(std::initializer_list<int64_t> dims) const;
  Tensor slice(int64_t begin, int64_t end) const;  // rows [begin, end) along axis 0
  Tensor row(int64_t index) const;                 // row `index` along axis 0, rank - 1
  // The first bytes of this tensor's memory read as a `dtype` tensor of `shape` (no copy, no
  // conversion): a buffer sized for one dtype holding a smaller one (a float32 gradient buffer
  // holding a bfloat16 gradient). The view must fit in this tensor's bytes.
  Tensor view_as(DType dtype, const Shape& shape) const;

  Tensor clone() const;
  // Copies `src`'s elements into this tensor; shapes and dtypes must match.
  void copy_from(const Tensor& src) const;
  // Element conversion to another dtype (a copy even when the dtype is the same).
  Tensor to(DType dtype) const;

  // The single element of a one-element tensor, as double.
  double item() const;
  // All elements converted to T.
  template <typename T>
  std::vector<T> to_vector() const;
  // Element i (flat index) converted to double; slow, for tests and printing.
  double at(int64_t flat_index) const;

  // "Tensor(shape=[2, 3], dtype=float32, [[...]])", abbreviated past `max_elements`.
  std::string to_string(int64_t max_elements = 20) const;
  std::string describe() const;  // "float32[2, 3]" for error messages

  void check_dtype(DType expected, const char* what) const;

 private:
  void reset();
  Storage* storage_ = nullptr;
  size_t offset_ = 0;  // bytes into the storage
  Shape shape_;
  DType dtype_ = DType::float32;
  uint64_t id_ = 0;
};

// A fresh identity for a tensor handle (unique within the process).
uint64_t next_tensor_id();

template <typename T>
Tensor Tensor::from_span(std::span<const T> values, const Shape& shape) {
  LOCKSTEP_CHECK(static_cast<int64_t>(values.size()) == shape.num_elements(),
                 "Tensor::from_vector: ", values.size(), " values do not fill shape ", shape, " (",
                 shape.num_elements(), " elements).");
  Tensor t(shape, dtype_v<T>);
  T* d = t.data<T>();
  for (size_t i = 0; i < values.size(); ++i) d[i] = values[i];
  return t;
}

template <typename T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape) {
  return from_span(std::span<const T>(values), shape);
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  std::vector<T> out(static_cast<size_t>(num_elements()));
  if (dtype_ == dtype_v<T>) {
    const T* d = data<T>();
    for (size_t i = 0; i < out.size(); ++i) out[i] = d[i];
  } else {
    for (size_t i = 0; i < out.size(); ++i) {
      if constexpr (std::is_same_v<T, bfloat16>) {
        out[i] = bfloat16(static_cast<float>(at(static_cast<int64_t>(i))));
      } else {
        out[i] = static_cast<T>(at(static_cast<int64_t>(i)));
      }
    }
  }
  return out;
}

}  // namespace lockstep
