#pragma once
// Fakes for the step's parts: an elementwise rule simple enough to check by hand, a cross-worker
// communicator standing for two identical workers, a strategy of N replicas on T threads,
// variables of odd sizes (several chunks, a chunk cut short at the end of each), and per-replica
// input pipelines that count their pulls.
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "distribute/step/step_input.h"
#include "lockstep/autodiff/variable.h"
#include "lockstep/core/bfloat16.h"
#include "lockstep/core/error.h"
#include "lockstep/distribute/collective.h"
#include "lockstep/distribute/elementwise_update.h"
#include "lockstep/distribute/strategy.h"
#include "testing/paired_layout.h"

namespace lockstep::distribute::testing {

// w' = w - g / 2, m' = m + g (one slot, m); with `rounding`, the bfloat16 rounding of w' goes to
// a buffer kept beside each variable, as float32 values or (`bfloat16_copy`) as bfloat16, which
// the step may swap a spare in for (`swappable`, as a Keras optimizer's copy). Counts its
// begin/end calls and the swaps.
class FakeUpdate : public ElementwiseUpdate {
 public:
  // paired: the bfloat16 copy of each variable is kept in pairs of rows (paired_layout(n)).
  explicit FakeUpdate(bool rounding = false, bool bfloat16_copy = false, bool swappable = true,
                      bool paired = false)
      : rounding_(rounding),
        bfloat16_copy_(bfloat16_copy || paired),
        swappable_(swappable),
        paired_(paired) {}
  // A variable of n elements as a matrix of n / 100 rows of 100 (or n rows of 1 when smaller), in
  // tiles of 8 x 16 with the rows and columns padded to them, the tiles along the columns
  // outermost (oneDNN's BA16a...b2a order with smaller tiles).
  static PairedRowsLayout paired_layout(int64_t n) {
    const int64_t cols = n % 100 == 0 ? 100 : 1, rows = n / cols;
    return lockstep::testing::tiled_paired_layout(rows, cols, 8, 16);
  }
  void bind(const std::vector<Variable>& vars) override {
    for (const Variable& v : vars) {
      slots_.push_back(Variable(Tensor::zeros(v.shape(), DType::float32), v.name() + "/m", false));
      if (paired_) {
        layouts_.push_back(std::make_unique<PairedRowsLayout>(paired_layout(v.num_elements())));
        rounded_.push_back(Tensor::zeros({layouts_.back()->size}, DType::bfloat16));
        continue;
      }
      rounded_.push_back(
          Tensor::zeros(v.shape(), bfloat16_copy_ ? DType::bfloat16 : DType::float32));
    }
  }
  std::vector<Variable> slot_variables(size_t i) const override { return {slots_[i]}; }
  bool rewrites_gradient() const override { return false; }
  void begin_update(std::span<const double> norms) override {
    ++begins;
    norms_.assign(norms.begin(), norms.end());
  }
  void apply(size_t, int64_t, const float* w, float* g, std::span<const float* const> slots,
             float* w_out, std::span<float* const> slots_out, size_t n, RoundedOut rounded,
             Streamed streamed) const override {
    if (streamed.rounded) rounded_streamed.fetch_add(1, std::memory_order_relaxed);
    for (size_t j = 0; j < n; ++j) {
      w_out[j] = w[j] - g[j] * 0.5f;
      slots_out[0][j] = slots[0][j] + g[j];
      if (rounded.values != nullptr) rounded.values[j] = static_cast<float>(bfloat16(w_out[j]));
      const bfloat16 r(w_out[j]);
      if (rounded.bf16 != nullptr) rounded.store(j, &r, 1);
    }
  }
  void end_update() override { ++ends; }
  RoundedOut rounded_output(size_t i) const override {
    if (!rounding_) return {};
    if (paired_) return {.bf16 = rounded_[i].data<bfloat16>(), .layout = layouts_[i].get()};
    if (bfloat16_copy_) return {.bf16 = rounded_[i].data<bfloat16>()};
    return {.values = rounded_[i].data<float>()};
  }
  // One copy serves both: the fake keeps no copy per buffer.
  RoundedOut rounded_output_in_place(size_t i) const override { return rounded_output(i); }
  bool swaps_rounded_output() const override { return swappable_; }
  void swap_rounded_output(size_t i, Tensor& spare) override {
    if (!swappable_) throw Internal("FakeUpdate: swap_rounded_output on a rule that cannot");
    if (spare.dtype() != rounded_[i].dtype() || !(spare.shape() == rounded_[i].shape()))
      throw Internal("FakeUpdate: a spare of another dtype or shape");
    std::swap(rounded_[i], spare);
    ++swaps;
  }

  const Variable& slot(size_t i) const { return slots_[i]; }
  // The kept rounding of variable i's element j, as a float.
  float rounded(size_t i, size_t j) const {
    if (paired_) {
      const PairedRowsLayout& l = *layouts_[i];
      const auto e = static_cast<int64_t>(j);
      return static_cast<float>(rounded_[i].data<bfloat16>()[l.offset(e / l.cols, e % l.cols)]);
    }
    return bfloat16_copy_ ? static_cast<float>(rounded_[i].data<bfloat16>()[j])
                          : rounded_[i].data<float>()[j];
  }
  // The paired copies' padding: every element no variable's element maps to is zero.
  bool padding_is_zero() const {
    for (size_t i = 0; i < layouts_.size(); ++i) {
      const PairedRowsLayout& l = *layouts_[i];
      std::vector<bool> used(static_cast<size_t>(l.size));
      for (int64_t e = 0; e < l.rows * l.cols; ++e)
        used[static_cast<size_t>(l.offset(e / l.cols, e % l.cols))] = true;
      const bfloat16* r = rounded_[i].data<bfloat16>();
      for (size_t at = 0; at < used.size(); ++at)
        if (!used[at] && r[at].bits != 0) return false;
    }
    return true;
  }
  std::vector<double> norms_;
  int begins = 0, ends = 0, swaps = 0;
  // Calls asked to stream their rounding (Streamed::rounded; a hint this rule ignores).
  mutable std::atomic<int> rounded_streamed{0};

 private:
  bool rounding_, bfloat16_copy_, swappable_, paired_;
  std::vector<Variable> slots_;
  std::vector<Tensor> rounded_;
  std::vector<std::unique_ptr<PairedRowsLayout>> layouts_;
};

// The cross-worker communicator of one worker of two whose other worker offers the same values:
// every sum doubles (bfloat16 sums in float32, rounded once). Counts the all-reduces.
class TwinWorker : public Communicator {
 public:
  TwinWorker() : Communicator(CommunicationOptions{}) {}
  int rank() const override { return 0; }
  int size() const override { return 2; }
  std::string_view backend() const override { return "twin"; }
  int all_reduces = 0;

 protected:
  void do_all_reduce(void* buf, size_t count, DType dtype, ReduceOp op) override {
    ++all_reduces;
    if (op == ReduceOp::MAX) return;
    if (dtype == DType::float32) {
      auto* f = static_cast<float*>(buf);
      for (size_t i = 0; i < count; ++i) f[i] += f[i];
    } else if (dtype == DType::bfloat16) {
      auto* b = static_cast<bfloat16*>(buf);
      for (size_t i = 0; i < count; ++i)
        b[i] = bfloat16(static_cast<float>(b[i]) + static_cast<float>(b[i]));
    } else if (dtype == DType::float64) {
      auto* d = static_cast<double*>(buf);
      for (size_t i = 0; i < count; ++i) d[i] += d[i];
    } else if (dtype == DType::int64) {
      auto* d = static_cast<int64_t*>(buf);
      for (size_t i = 0; i < count; ++i) d[i] += d[i];
    }
  }
  void do_reduce_scatter(const void*, void*, size_t, DType, ReduceOp) override {}
  void do_all_gather(const void*, void*, size_t, DType) override {}
  void do_broadcast(void*, size_t, DType, int) override {}
  void do_barrier() override {}
};

// N local replicas on `threads` task-pool threads (no cores pinned).
inline std::unique_ptr<Strategy> make_strategy(int replicas, int threads) {
  StrategyConfig config;
  config.name = "StepTest";
  config.replica_cores.assign(static_cast<size_t>(replicas), {});
  config.num_threads = threads;
  return std::make_unique<Strategy>(std::move(config));
}

// Variables of `sizes` elements, element j of variable v = v + j / 1024.
inline std::vector<Variable> make_variables(const std::vector<int64_t>& sizes) {
  std::vector<Variable> vars;
  for (size_t v = 0; v < sizes.size(); ++v) {
    Tensor t({sizes[v]}, DType::float32);
    for (int64_t j = 0; j < sizes[v]; ++j)
      t.data<float>()[j] = static_cast<float>(v) + static_cast<float>(j) / 1024.0f;
    vars.emplace_back(t, "v" + std::to_string(v));
  }
  return vars;
}

// A gradient value that differs per replica, variable and element, and is not a round number.
inline float gradient_value(int replica, size_t var, int64_t j, float scale = 1.0f) {
  return scale * (0.1f * static_cast<float>(replica + 1) + 0.01f * static_cast<float>(var) +
                  static_cast<float>(j % 97) / 3.0f);
}

// Per replica, a pipeline whose pull k (from 1) yields the scalar 10 * (replica + 1) + k, except
// that pull `bad` of replica `bad_replica` throws DataLoss.
struct CountingPipelines {
  explicit CountingPipelines(int replicas) : pulls(static_cast<size_t>(replicas), 0) {}
  std::mutex mu;
  std::vector<int> pulls;
  int bad_replica = -1, bad = -1;
  Element pull(int r) {
    int k = 0;
    {
      std::lock_guard lock(mu);
      k = ++pulls[static_cast<size_t>(r)];
    }
    if (r == bad_replica && k == bad) throw DataLoss("corrupt record at pull " + std::to_string(k));
    return {Tensor::scalar(static_cast<float>(10 * (r + 1) + k))};
  }
  std::vector<int> counts() {
    std::lock_guard lock(mu);
    return pulls;
  }
  StepInput input() {
    return StepInput([this](int r) { return pull(r); });
  }
};

inline float value(const Element& e) {
  return e[0].data<float>()[0];
}

}  // namespace lockstep::distribute::testing
