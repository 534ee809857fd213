#include "lockstep/data/bytes.h"

#include <cstring>

#include "lockstep/core/check.h"

namespace lockstep {

Tensor bytes_tensor(std::string_view s) {
  Tensor t({static_cast<int64_t>(s.size())}, DType::uint8);
  if (!s.empty()) std::memcpy(t.raw_data(), s.data(), s.size());
  return t;
}

std::string_view bytes_view(const Tensor& t, const char* what) {
  LOCKSTEP_CHECK(t.defined() && t.dtype() == DType::uint8 && t.rank() == 1, what,
                 ": expected a byte string (uint8 tensor of rank 1). Received ",
                 t.defined() ? t.describe() : std::string("an undefined tensor"), ".");
  return {static_cast<const char*>(t.raw_data()), static_cast<size_t>(t.dim(0))};
}

RaggedBytes RaggedBytes::from_strings(const std::vector<std::string>& strings) {
  size_t total = 0;
  for (const std::string& s : strings) total += s.size();
  RaggedBytes r{Tensor({static_cast<int64_t>(total)}, DType::uint8),
                Tensor({static_cast<int64_t>(strings.size()) + 1}, DType::int64)};
  auto* v = static_cast<char*>(r.values.raw_data());
  int64_t* splits = r.row_splits.data<int64_t>();
  splits[0] = 0;
  for (size_t j = 0; j < strings.size(); ++j) {
    if (!strings[j].empty()) std::memcpy(v + splits[j], strings[j].data(), strings[j].size());
    splits[j + 1] = splits[j] + static_cast<int64_t>(strings[j].size());
  }
  return r;
}

std::string_view RaggedBytes::at(int64_t j) const {
  LOCKSTEP_CHECK(j >= 0 && j < size(), "RaggedBytes::at: index ", j, " out of range for ", size(),
                 " strings.");
  const int64_t* s = row_splits.data<int64_t>();
  return {static_cast<const char*>(values.raw_data()) + s[j], static_cast<size_t>(s[j + 1] - s[j])};
}

std::vector<std::string> RaggedBytes::to_strings() const {
  std::vector<std::string> out;
  for (int64_t j = 0; j < size(); ++j) out.emplace_back(at(j));
  return out;
}

}  // namespace lockstep
