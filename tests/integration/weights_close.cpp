// weights_close A B [rtol]: exit 0 when the safetensors files A and B hold the same tensors (names,
// shapes, dtypes) with every float element within rtol (default 1e-5) relative to max(|b|, 1e-2)
// (weights that pass near 0 are compared absolutely at 1e-2 * rtol, as the replica-equivalence
// tests do), else exit 1 naming the first difference. Prints the largest relative difference either
// way. The CLI tests use it to compare the weights `lockstep train --save-weights` wrote in two
// runs.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <string>

#include "lockstep/keras/saving/safetensors.h"

int main(int argc, char** argv) {
  if (argc < 3 || argc > 4) {
    std::cerr << "usage: weights_close A.safetensors B.safetensors [rtol]\n";
    return 2;
  }
  const double rtol = argc == 4 ? std::atof(argv[3]) : 1e-5;
  try {
    using lockstep::keras::saving::load_safetensors;
    const auto a = load_safetensors(argv[1]);
    const auto b = load_safetensors(argv[2]);
    if (a.tensors.size() != b.tensors.size()) {
      std::cerr << "different tensor counts: " << a.tensors.size() << " vs " << b.tensors.size()
                << "\n";
      return 1;
    }
    double worst = 0;
    std::string worst_at;
    for (size_t i = 0; i < a.tensors.size(); ++i) {
      const auto& [name_a, ta] = a.tensors[i];
      const auto& [name_b, tb] = b.tensors[i];
      if (name_a != name_b || !(ta.shape() == tb.shape()) || ta.dtype() != tb.dtype()) {
        std::cerr << "tensor " << i << " differs: " << name_a << " " << ta.describe() << " vs "
                  << name_b << " " << tb.describe() << "\n";
        return 1;
      }
      for (int64_t k = 0; k < ta.num_elements(); ++k) {
        const double x = ta.at(k), y = tb.at(k);
        const double rel = std::abs(x - y) / std::max(std::abs(y), 1e-2);
        if (std::isnan(rel) || rel > worst) {
          worst = std::isnan(rel) ? INFINITY : rel;
          worst_at = name_a + "[" + std::to_string(k) + "] " + std::to_string(x) + " vs " +
                     std::to_string(y);
        }
      }
    }
    std::cout << "max relative difference " << worst << (worst_at.empty() ? "" : " at ") << worst_at
              << "\n";
    return worst <= rtol ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "weights_close: " << e.what() << "\n";
    return 1;
  }
}
