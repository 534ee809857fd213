#include "lockstep/data/element.h"

#include <cstring>

#include "internal.h"

namespace lockstep {

TensorSpec TensorSpec::of(const Tensor& t) {
  auto dims = t.shape().dims();
  return {std::vector<int64_t>(dims.begin(), dims.end()), t.dtype()};
}

bool TensorSpec::is_compatible_with(const Tensor& t) const {
  if (t.dtype() != dtype || t.rank() != static_cast<int>(shape.size())) return false;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] != kUnknownDim && shape[i] != t.shape()[static_cast<int>(i)]) return false;
  }
  return true;
}

std::string TensorSpec::to_string() const {
  std::string s(dtype_name(dtype));
  s += '[';
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += shape[i] == kUnknownDim ? "?" : std::to_string(shape[i]);
  }
  return s + ']';
}

ElementSpec element_spec_of(const Element& element) {
  ElementSpec spec;
  spec.reserve(element.size());
  for (const Tensor& t : element) spec.push_back(TensorSpec::of(t));
  return spec;
}

std::string to_string(const ElementSpec& spec) {
  std::string s = "(";
  for (size_t i = 0; i < spec.size(); ++i) {
    if (i) s += ", ";
    s += spec[i].to_string();
  }
  return s + ')';
}

std::string describe(const Element& element) {
  return to_string(element_spec_of(element));
}

namespace data_internal {

uint64_t mix_key(uint64_t key, uint64_t value) {
  // splitmix64 finaliser: distinct (key, value) pairs give unrelated keys.
  uint64_t z = key * 0x9E3779B97F4A7C15ull + value + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void check_element_matches_batch(const Element& src, const Element& dst, const char* op) {
  bool ok = src.size() == dst.size();
  for (size_t c = 0; ok && c < src.size(); ++c) {
    const Tensor& s = src[c];
    const Tensor& d = dst[c];
    ok = s.dtype() == d.dtype() && d.rank() == s.rank() + 1;
    for (int i = 0; ok && i < s.rank(); ++i) ok = s.shape()[i] == d.shape()[i + 1];
  }
  if (!ok) {
    std::string rows = "(";
    for (size_t c = 0; c < dst.size(); ++c) {
      if (c) rows += ", ";
      rows += TensorSpec::of(dst[c]).to_string();
    }
    throw InvalidArgument(std::string(op) +
                          ": every element must have the shapes and dtypes of the first one "
                          "(batch " +
                          rows + "). Received an element " + describe(src) +
                          ". Map the elements to a common shape before batching.");
  }
}

void copy_element_into_rows(const Element& src, const Element& dst, int64_t row, const char* op) {
  check_element_matches_batch(src, dst, op);
  for (size_t c = 0; c < src.size(); ++c) {
    size_t bytes = src[c].nbytes();
    std::memcpy(static_cast<char*>(dst[c].raw_data()) + static_cast<size_t>(row) * bytes,
                src[c].raw_data(), bytes);
  }
}

void RandomAccess::check_rows(const Element&) const {}

void RandomAccess::copy_row(int64_t i, const Element& dst, int64_t row) const {
  thread_local Element tmp;
  get(i, tmp);
  copy_element_into_rows(tmp, dst, row, "batch");
}

int64_t IteratorImpl::next_rows(const Element& dst, int64_t row, int64_t n) {
  int64_t k = 0;
  for (; k < n && next(scratch_); ++k) copy_element_into_rows(scratch_, dst, row + k, "batch");
  return k;
}

int64_t IteratorImpl::skip(int64_t n) {
  int64_t k = 0;
  for (; k < n && next(scratch_); ++k) {
  }
  return k;
}

}  // namespace data_internal
}  // namespace lockstep
