#pragma once
// A tensor shape: up to kMaxRank dimensions stored inline, so copying a shape never allocates.
#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

namespace lockstep {

class Shape {
 public:
  static constexpr int kMaxRank = 8;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(std::span<const int64_t> dims);
  explicit Shape(const std::vector<int64_t>& dims) : Shape(std::span<const int64_t>(dims)) {}

  int rank() const { return rank_; }
  int64_t operator[](int axis) const { return dims_[static_cast<size_t>(axis)]; }
  int64_t& operator[](int axis) { return dims_[static_cast<size_t>(axis)]; }
  // Negative axes count from the end, as in NumPy. Throws InvalidArgument when out of range.
  int64_t dim(int axis) const { return dims_[static_cast<size_t>(normalize_axis(axis))]; }
  int normalize_axis(int axis) const;
  int64_t num_elements() const;
  std::span<const int64_t> dims() const { return {dims_.data(), static_cast<size_t>(rank_)}; }
  std::vector<int64_t> to_vector() const { return {dims_.begin(), dims_.begin() + rank_}; }

  // Shape with dimension `axis` removed / inserted / replaced.
  Shape without(int axis) const;
  Shape with_inserted(int axis, int64_t size) const;
  Shape with_dim(int axis, int64_t size) const;
  void push_back(int64_t d);

  // "[128, 784]", the notation every error message uses.
  std::string to_string() const;

  friend bool operator==(const Shape& a, const Shape& b);

 private:
  std::array<int64_t, kMaxRank> dims_{};
  int rank_ = 0;
};

}  // namespace lockstep
