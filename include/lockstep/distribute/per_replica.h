#pragma once
// PerReplica<T>: one value per local replica, as tf.distribute's PerReplica. Returned by
// Strategy::run and produced by distributed datasets; Strategy::reduce turns it into one value.
#include <cstddef>
#include <vector>

namespace lockstep::distribute {

template <typename T>
struct PerReplica {
  std::vector<T> values;  // values[r] belongs to local replica r

  int size() const { return static_cast<int>(values.size()); }
  const T& operator[](int replica) const { return values[static_cast<size_t>(replica)]; }
  T& operator[](int replica) { return values[static_cast<size_t>(replica)]; }
};

}  // namespace lockstep::distribute
