#pragma once
// One optimizer update through the public ElementwiseUpdate path, split the way the training step
// splits it: the flat concatenation of `vars` cut at `cuts` (from 0 to the total element count),
// each range applied in place on a thread of its own, with the outputs `streamed` names written
// around the caches where the loop has such stores (each thread fences them before it ends, as
// the step does). Tests compare it with apply_gradients.
#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "lockstep/keras/mixed_precision.h"
#include "lockstep/keras/optimizers/optimizer.h"

namespace lockstep::keras::optimizers {

inline void update_in_ranges(Optimizer& opt, const std::vector<Tensor>& grads,
                             const std::vector<Variable>& vars, const std::vector<int64_t>& cuts,
                             distribute::Streamed streamed = {}) {
  opt.bind(vars);
  std::vector<double> squared_norms;
  if (opt.wants_gradient_norms()) {
    for (const Tensor& g : grads) {
      double s = 0.0;
      const float* p = g.data<float>();
      for (int64_t j = 0; j < g.num_elements(); ++j) s += static_cast<double>(p[j]) * p[j];
      squared_norms.push_back(s);
    }
  }
  opt.begin_update(squared_norms);
  auto run_range = [&](int64_t begin, int64_t end) {
    int64_t start = 0;
    for (size_t i = 0; i < vars.size(); ++i) {
      const int64_t n = vars[i].num_elements();
      const int64_t lo = std::max(begin, start), hi = std::min(end, start + n);
      const int64_t offset = lo - start;
      start += n;
      if (lo >= hi) continue;
      const size_t count = static_cast<size_t>(hi - lo);
      std::vector<float> g(count);  // apply() may rewrite it
      std::memcpy(g.data(), grads[i].data<float>() + offset, count * sizeof(float));
      std::vector<float*> slots;
      for (const Variable& s : opt.slot_variables(i)) {
        slots.push_back(s.raw_value().data<float>() + offset);
      }
      const std::vector<const float*> slots_in(slots.begin(), slots.end());
      float* w = vars[i].raw_value().data<float>() + offset;
      opt.apply(i, offset, w, g.data(), slots_in, w, slots, count,
                mixed_precision::rounded_weights_out(vars[i]).at(static_cast<size_t>(offset)),
                streamed);
    }
#if defined(__x86_64__)
    if (streamed) _mm_sfence();
#endif
  };
  std::vector<std::thread> threads;
  for (size_t r = 0; r + 1 < cuts.size(); ++r) {
    threads.emplace_back(run_range, cuts[r], cuts[r + 1]);
  }
  for (std::thread& t : threads) t.join();
  opt.end_update();
}

}  // namespace lockstep::keras::optimizers
