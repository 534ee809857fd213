#pragma once
// Helpers for the data-layer tests: read datasets of scalars back as plain vectors.
#include <cstdint>
#include <vector>

#include "lockstep/data/dataset.h"

namespace lockstep::testing_data {

// Component `c` of every element, each a scalar int64.
inline std::vector<int64_t> scalars(const Dataset& ds, size_t c = 0) {
  std::vector<int64_t> out;
  for (Element& e : ds) out.push_back(static_cast<int64_t>(e.at(c).item()));
  return out;
}

inline std::vector<int64_t> scalars_from(Iterator& it, int64_t n, size_t c = 0) {
  std::vector<int64_t> out;
  Element e;
  for (int64_t i = 0; i < n && it.next(e); ++i) out.push_back(static_cast<int64_t>(e.at(c).item()));
  return out;
}

// Every batch of a dataset of int64 batches, flattened per batch.
inline std::vector<std::vector<int64_t>> batches(const Dataset& ds, size_t c = 0) {
  std::vector<std::vector<int64_t>> out;
  for (Element& e : ds) out.push_back(e.at(c).to_vector<int64_t>());
  return out;
}

// The same values through a generator: no random access, so stages take their generic paths.
inline Dataset generator_range(int64_t n) {
  return Dataset::from_generator(
      [n] {
        return [n, i = int64_t{0}]() mutable -> std::optional<Element> {
          if (i >= n) return std::nullopt;
          Tensor t({}, DType::int64);
          *t.data<int64_t>() = i++;
          return Element{t};
        };
      },
      {TensorSpec{{}, DType::int64}});
}

inline Element scalar_element(int64_t v) {
  Tensor t({}, DType::int64);
  *t.data<int64_t>() = v;
  return {t};
}

}  // namespace lockstep::testing_data
