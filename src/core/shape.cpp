#include "lockstep/core/shape.h"

#include "lockstep/core/check.h"
#include "lockstep/core/error.h"

namespace lockstep {

Shape::Shape(std::initializer_list<int64_t> dims)
    : Shape(std::span<const int64_t>(dims.begin(), dims.size())) {}

Shape::Shape(std::span<const int64_t> dims) {
  LOCKSTEP_CHECK(dims.size() <= static_cast<size_t>(kMaxRank), "Shapes have at most ", kMaxRank,
                 " dimensions. Received rank ", dims.size(), ".");
  for (int64_t d : dims) push_back(d);
}

void Shape::push_back(int64_t d) {
  LOCKSTEP_CHECK(rank_ != kMaxRank, "Shapes have at most ", kMaxRank, " dimensions.");
  LOCKSTEP_CHECK(d >= 0, "Dimensions must be >= 0. Received ", d, ".");
  dims_[static_cast<size_t>(rank_++)] = d;
}

int Shape::normalize_axis(int axis) const {
  int a = axis < 0 ? axis + rank_ : axis;
  LOCKSTEP_CHECK(a >= 0 && a < rank_, "Axis ", axis, " is out of range for shape ", to_string(),
                 " of rank ", rank_, ".");
  return a;
}

int64_t Shape::num_elements() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[static_cast<size_t>(i)];
  return n;
}

Shape Shape::without(int axis) const {
  int a = normalize_axis(axis);
  Shape s;
  for (int i = 0; i < rank_; ++i)
    if (i != a) s.push_back(dims_[static_cast<size_t>(i)]);
  return s;
}

Shape Shape::with_inserted(int axis, int64_t size) const {
  int a = axis < 0 ? axis + rank_ + 1 : axis;
  LOCKSTEP_CHECK(a >= 0 && a <= rank_, "Cannot insert axis ", axis, " into shape ", to_string(),
                 ".");
  Shape s;
  for (int i = 0; i < rank_; ++i) {
    if (i == a) s.push_back(size);
    s.push_back(dims_[static_cast<size_t>(i)]);
  }
  if (a == rank_) s.push_back(size);
  return s;
}

Shape Shape::with_dim(int axis, int64_t size) const {
  Shape s = *this;
  s.dims_[static_cast<size_t>(normalize_axis(axis))] = size;
  return s;
}

std::string Shape::to_string() const {
  std::string s = "[";
  for (int i = 0; i < rank_; ++i) {
    if (i) s += ", ";
    s += std::to_string(dims_[static_cast<size_t>(i)]);
  }
  return s + "]";
}

bool operator==(const Shape& a, const Shape& b) {
  if (a.rank_ != b.rank_) return false;
  for (int i = 0; i < a.rank_; ++i)
    if (a.dims_[static_cast<size_t>(i)] != b.dims_[static_cast<size_t>(i)]) return false;
  return true;
}

}  // namespace lockstep
