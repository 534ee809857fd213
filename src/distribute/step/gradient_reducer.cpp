#include "gradient_reducer.h"

#include <cstring>

#include "deferred_sums.h"
#include "lockstep/core/bfloat16.h"
#include "lockstep/core/profiler.h"
#include "lockstep/distribute/background_reducer.h"
#include "lockstep/distribute/collective.h"
#include "lockstep/ops/elementwise.h"
#include "task_pool.h"

namespace lockstep::distribute {

// A chunk of the local sum, computed into the running thread's scratch and copied to its
// destination (the accumulator being written, or the sum) by the run that commits.
class GradientReducer::SumPhase : public TaskPhase {
 public:
  explicit SumPhase(GradientReducer& reducer) : r_(reducer) {}
  // Set before each run of this phase, while no run of it executes.
  Terms in;
  float* out = nullptr;
  int num_tasks() const override { return static_cast<int>(r_.layout_.chunks().size()); }
  int kind() const override { return 1; }
  profiler::Phase trace_phase() const override { return profiler::Phase::local_reduce; }
  void* run(int task, int thread) override {
    float* g = r_.scratch_[static_cast<size_t>(thread)].data();
    sum_chunk(r_.layout_.chunks()[static_cast<size_t>(task)], in, g);
    return g;
  }
  void commit(int task, void* result) override {
    const Chunk& c = r_.layout_.chunks()[static_cast<size_t>(task)];
    std::memcpy(out + c.flat, result, static_cast<size_t>(c.n) * sizeof(float));
  }
  void discard(int, void*) override {}

 private:
  GradientReducer& r_;
};

GradientReducer::GradientReducer(const ChunkLayout& layout, std::shared_ptr<Communicator> cross,
                                 std::unique_ptr<CommHook> hook, size_t bytes_per_bucket)
    : layout_(layout), cross_(std::move(cross)), hook_(std::move(hook)) {
  const int64_t n = std::max<int64_t>(layout_.total(), 1);
  accumulator_[0] = Tensor({n}, DType::float32);
  accumulator_[1] = Tensor({n}, DType::float32);
  accumulate_phase_ = std::make_unique<SumPhase>(*this);
  sum_phase_ = std::make_unique<SumPhase>(*this);
  make_buckets(bytes_per_bucket);
}

GradientReducer::~GradientReducer() = default;

GradientReducer::Terms GradientReducer::terms(const std::vector<ReplicaRun*>& runs) const {
  return {&runs, acc_valid_ ? accumulator_[acc_current_].data<float>() : nullptr};
}

namespace {
GradientReducer::Term run_term(const ReplicaRun& r, const Chunk& c) {
  if (r.gradient_dtype(c.var) == DType::bfloat16)
    return {nullptr, r.bf16_gradient(c.var) + c.offset};
  return {r.flat_gradients() + c.flat, nullptr};
}

// out = t, and out += t, widening a bfloat16 term (exact): the float32 sums of the same values.
void load_term(float* out, const GradientReducer::Term& t, int64_t n) {
  if (t.f32 != nullptr) {
    std::memcpy(out, t.f32, static_cast<size_t>(n) * sizeof(float));
  } else {
    bfloat16_to_float(t.bf16, out, static_cast<size_t>(n));
  }
}
void add_term(float* out, const GradientReducer::Term& t, int64_t n) {
  if (t.f32 != nullptr) {
    ops::add_into(out, t.f32, n);
    return;
  }
  add_bfloat16_to_float(t.bf16, out, static_cast<size_t>(n));
}
}  // namespace

int GradientReducer::chunk_terms(const Chunk& c, const Terms& in, Term terms[2]) {
  int count = 0;
  auto term = [&](Term t) {
    if (count < 2) terms[count] = t;
    ++count;
  };
  if (in.accumulator != nullptr) term({in.accumulator + c.flat, nullptr});
  for (const ReplicaRun* r : *in.runs) {
    if (r->has_gradient(c.var)) term(run_term(*r, c));
  }
  return count;
}

void GradientReducer::sum_chunk(const Chunk& c, const Terms& in, float* out) {
  // ((t_0 + t_1) + t_2) + ... whatever thread runs it.
  Term first;
  bool has_first = false, summed = false;
  auto term = [&](const Term& t) {
    if (summed) {
      add_term(out, t, c.n);
    } else if (has_first && first.f32 != nullptr && t.f32 != nullptr) {
      ops::sum_into(out, first.f32, t.f32, c.n);
      summed = true;
    } else if (has_first) {
      load_term(out, first, c.n);
      add_term(out, t, c.n);
      summed = true;
    } else {
      first = t;
      has_first = true;
    }
  };
  if (in.accumulator != nullptr) term({in.accumulator + c.flat, nullptr});
  for (const ReplicaRun* r : *in.runs) {
    if (r->has_gradient(c.var)) term(run_term(*r, c));
  }
  if (summed) return;
  if (has_first) {
    load_term(out, first, c.n);
  } else {
    std::memset(out, 0, static_cast<size_t>(c.n) * sizeof(float));
  }
}

const float* GradientReducer::sole_gradient(const Chunk& c, const Terms& in) {
  if (in.accumulator != nullptr) return nullptr;
  const float* only = nullptr;
  for (const ReplicaRun* r : *in.runs) {
    if (!r->has_gradient(c.var)) continue;
    if (only != nullptr || r->gradient_dtype(c.var) != DType::float32) return nullptr;
    only = r->flat_gradients() + c.flat;
  }
  return only;
}

void GradientReducer::accumulate(TaskPool& pool, const std::vector<ReplicaRun*>& runs) {
  ensure_scratch(pool);
  accumulate_phase_->in = terms(runs);
  accumulate_phase_->out = accumulator_[1 - acc_current_].data<float>();
  pool.run(*accumulate_phase_);
  acc_current_ = 1 - acc_current_;
  acc_valid_ = true;
}

void GradientReducer::ensure_scratch(const TaskPool& pool) {
  scratch_.resize(static_cast<size_t>(pool.total_threads()),
                  std::vector<float>(static_cast<size_t>(layout_.chunk_size())));
}

void GradientReducer::ensure_sum_buffer() {
  if (!summed_.defined())
    summed_ = Tensor({layout_.total() + DeferredSums::kCountElements}, DType::float32);
}

float* GradientReducer::local_sum(TaskPool& pool, const std::vector<ReplicaRun*>& runs) {
  // One local replica with every gradient: its buffer is the local sum, summed across workers in
  // place (no sum phase, whose chunks copy the gradient twice).
  if (!acc_valid_) {
    const ReplicaRun* only = nullptr;
    bool several = false;
    for (const ReplicaRun* r : runs) {
      if (!r->has_any_gradient()) continue;
      several = only != nullptr;
      if (several) break;
      only = r;
    }
    if (!several && only != nullptr && only->has_every_gradient() && only->float32_gradients())
      return only->flat_gradients();
  }
  ensure_sum_buffer();
  ensure_scratch(pool);
  sum_phase_->in = terms(runs);
  sum_phase_->out = summed_.data<float>();
  pool.run(*sum_phase_);
  return summed_.data<float>();
}

void GradientReducer::all_reduce(float* sum, int64_t extra) {
  profiler::ScopedSpan trace(profiler::Phase::all_reduce);
  hook_->all_reduce(*cross_, sum, static_cast<size_t>(layout_.total() + extra));
}

DType GradientReducer::wire_dtype() const {
  return hook_ ? hook_->wire_dtype() : DType::float32;
}

std::vector<double> GradientReducer::squared_norms(const float* g) const {
  std::vector<double> norms;
  for (size_t v = 0; v < layout_.num_vars(); ++v) {
    double sq = 0;
    const float* x = g + layout_.begin(v);
    for (int64_t j = 0, n = layout_.size(v); j < n; ++j) sq += static_cast<double>(x[j]) * x[j];
    norms.push_back(sq);
  }
  return norms;
}

}  // namespace lockstep::distribute
