#include "lockstep/autodiff/gradient_tape.h"

#include "lockstep/core/check.h"
#include "lockstep/core/task_cancellation.h"
#include "lockstep/ops/bfloat16_values.h"
#include "lockstep/ops/elementwise.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_map>
#include <unordered_set>

namespace lockstep {

struct GradientTape::Impl {
  struct TensorInfo {
    uint64_t id;
    Shape shape;
    DType dtype;
  };
  struct Record {
    std::string_view op_name;
    std::vector<TensorInfo> inputs;
    std::vector<TensorInfo> outputs;
    BackwardFunction backward;  // one of these two is set
    BackwardIntoFunction backward_into;
    // note_rounds_output_gradient: ids of outputs whose gradient the backward rounds.
    std::vector<uint64_t> rounds_gradient_of;
  };

  bool persistent;
  bool watch_accessed_variables;
  GradientTape::GradientReadyCallback on_ready;
  bool recording = true;
  bool used = false;
  std::unordered_set<uint64_t> tracked;
  std::vector<Record> records;

  bool tracks_any(std::initializer_list<const Tensor*> inputs) const {
    for (const Tensor* t : inputs)
      if (t->defined() && tracked.count(t->id())) return true;
    return false;
  }
  bool tracks_any(const std::vector<Tensor>& inputs) const {
    for (const Tensor& t : inputs)
      if (t.defined() && tracked.count(t.id())) return true;
    return false;
  }
};

namespace {

thread_local std::vector<GradientTape::Impl*> tape_stack;

GradientTape::Impl::TensorInfo info(const Tensor& t) {
  return {t.id(), t.shape(), t.dtype()};
}

}  // namespace

GradientTape::GradientTape(bool persistent, bool watch_accessed_variables)
    : impl_(std::make_unique<Impl>()) {
  impl_->persistent = persistent;
  impl_->watch_accessed_variables = watch_accessed_variables;
  tape_stack.push_back(impl_.get());
}

GradientTape::~GradientTape() {
  // Tapes usually die in reverse order of creation, but a moved-around tape must not corrupt the
  // stack, so remove this one wherever it is.
  auto it = std::find(tape_stack.begin(), tape_stack.end(), impl_.get());
  if (it != tape_stack.end()) tape_stack.erase(it);
}

void GradientTape::set_gradient_ready_callback(GradientReadyCallback fn) {
  impl_->on_ready = std::move(fn);
}

void GradientTape::watch(const Tensor& tensor) {
  impl_->tracked.insert(tensor.id());
}
void GradientTape::watch(const Variable& variable) {
  impl_->tracked.insert(variable.raw_value().id());
}

GradientTape::StopRecording::StopRecording(GradientTape& tape)
    : tape_(tape), was_recording_(tape.impl_->recording) {
  tape_.impl_->recording = false;
}
GradientTape::StopRecording::~StopRecording() {
  tape_.impl_->recording = was_recording_;
}

std::vector<Tensor> GradientTape::gradient(const Tensor& target, const std::vector<Tensor>& sources,
                                           const Tensor& output_gradient) {
  return gradient(target, sources, std::vector<Tensor>(), output_gradient);
}

std::vector<Tensor> GradientTape::gradient(const Tensor& target, const std::vector<Tensor>& sources,
                                           const std::vector<Tensor>& destinations,
                                           const Tensor& output_gradient) {
  Impl& t = *impl_;
  LOCKSTEP_CHECK_AS(FailedPrecondition, !t.used || t.persistent,
                    "GradientTape::gradient can only be called once on a non-persistent tape. "
                    "Create the tape with persistent = true to compute several gradients.");
  LOCKSTEP_CHECK(destinations.empty() || destinations.size() == sources.size(),
                 "GradientTape::gradient: expected one destination per source (", sources.size(),
                 "). Received ", destinations.size(), ".");
  t.used = true;
  // Backward functions must not append to the record list this loop walks.
  struct Pause {
    Impl& t;
    bool was;
    ~Pause() { t.recording = was; }
  } pause{t, t.recording};
  t.recording = false;
  LOCKSTEP_CHECK(target.defined(), "GradientTape::gradient: the target is undefined.");
  Tensor seed = output_gradient;
  if (seed.defined()) {
    LOCKSTEP_CHECK(seed.shape() == target.shape() && seed.dtype() == target.dtype(),
                   "GradientTape::gradient: output_gradient ", seed.describe(),
                   " does not match the target ", target.describe(), ".");
  } else {
    seed = Tensor::ones(target.shape(), target.dtype());
  }

  // A handful of sources (a model's variables): linear scans beat hashing.
  auto source_index = [&sources](uint64_t id) -> int {
    for (size_t i = 0; i < sources.size(); ++i)
      if (sources[i].id() == id) return static_cast<int>(i);
    return -1;
  };
  // A source's gradient lives in its destination once one has been written there; later
  // contributions are added into it in place (the same sum, a + b, as accumulate()).
  std::vector<char> in_destination(sources.size(), 0);
  auto destination_of = [&](int s) -> const Tensor* {
    if (s < 0 || destinations.empty() || !destinations[static_cast<size_t>(s)].defined())
      return nullptr;
    return &destinations[static_cast<size_t>(s)];
  };
  for (size_t i = 0; i < destinations.size(); ++i) {
    const Tensor& d = destinations[i];
    LOCKSTEP_CHECK(!d.defined() || d.shape() == sources[i].shape(),
                   "GradientTape::gradient: destination ", i, " is ", d.describe(),
                   "; expected the shape of its source ", sources[i].describe(), ".");
  }

  std::unordered_map<uint64_t, Tensor> grads;
  grads.emplace(target.id(), seed);

  // Readiness: a source's gradient is final once the earliest record that reads it has been
  // differentiated (records run in reverse). Without a callback nothing is computed.
  const size_t no_record = t.records.size();
  std::vector<size_t> first_reader;
  std::vector<char> reported;
  if (t.on_ready) {
    first_reader.assign(sources.size(), no_record);
    reported.assign(sources.size(), 0);
    for (size_t k = 0; k < t.records.size(); ++k) {
      for (const auto& in : t.records[k].inputs) {
        int s = source_index(in.id);
        if (s >= 0 && first_reader[static_cast<size_t>(s)] == no_record)
          first_reader[static_cast<size_t>(s)] = k;
      }
    }
  }
  // Gradients the producing op reads rounded to bfloat16 values (note_rounds_output_gradient):
  // the record whose contribution completes each (the earliest reader; records run in reverse).
  std::unordered_map<uint64_t, size_t> rounded_sum_at;
  for (const auto& r : t.records) {
    for (uint64_t id : r.rounds_gradient_of) rounded_sum_at.emplace(id, no_record);
  }
  if (!rounded_sum_at.empty()) {
    for (size_t k = 0; k < t.records.size(); ++k) {
      for (const auto& in : t.records[k].inputs) {
        auto it = rounded_sum_at.find(in.id);
        if (it != rounded_sum_at.end() && it->second == no_record) it->second = k;
      }
    }
  }
  // True when input i of record k adds the last contribution to a gradient read rounded.
  auto completes_rounded_sum = [&](size_t k, const std::vector<Impl::TensorInfo>& inputs,
                                   size_t i) {
    auto it = rounded_sum_at.find(inputs[i].id);
    if (it == rounded_sum_at.end() || it->second != k) return false;
    for (size_t j = i + 1; j < inputs.size(); ++j) {
      if (inputs[j].id == inputs[i].id) return false;  // the record adds another one after it
    }
    return true;
  };
  // Puts source i's gradient into its destination (converting its dtype if needed) and returns
  // the tensor gradient() reports for it.
  auto finalize = [&](size_t i) -> Tensor {
    auto it = grads.find(sources[i].id());
    if (it == grads.end()) return Tensor();
    const Tensor* d = destination_of(static_cast<int>(i));
    if (!d || in_destination[i]) return it->second;
    // A gradient of another dtype (e.g. bfloat16 for a float32 destination): converted once —
    // widened, never narrowed (a float32 gradient, e.g. the sum of two bfloat16 contributions, for
    // a bfloat16 destination is returned as it is).
    if (d->dtype() == DType::bfloat16 && it->second.dtype() != DType::bfloat16) return it->second;
    Tensor f = it->second.dtype() == d->dtype() ? it->second : it->second.to(d->dtype());
    std::memcpy(d->raw_data(), f.raw_data(), d->nbytes());
    it->second = *d;
    in_destination[i] = 1;
    return *d;
  };
  auto report_ready = [&](size_t k) {
    if (!t.on_ready) return;
    for (size_t i = 0; i < sources.size(); ++i) {
      if (first_reader[i] != k || reported[i]) continue;
      reported[i] = 1;
      t.on_ready(i, finalize(i));
    }
  };

  std::vector<Tensor> grad_outputs, sinks;
  for (auto rec = t.records.rbegin(); rec != t.records.rend(); ++rec) {
    // Between backward ops: a safe point for a training-step run whose twin already finished.
    check_task_cancelled();
    const size_t k = t.records.size() - 1 - static_cast<size_t>(rec - t.records.rbegin());
    bool any = false;
    for (const auto& o : rec->outputs) any |= grads.count(o.id) > 0;
    if (!any) {
      report_ready(k);
      continue;
    }
    grad_outputs.clear();
    for (const auto& o : rec->outputs) {
      auto it = grads.find(o.id);
      if (it == grads.end()) {
        grad_outputs.push_back(Tensor::zeros(o.shape, o.dtype));
      } else {
        grad_outputs.push_back(it->second);
        // Intermediate gradients are dropped as soon as they are consumed to bound memory.
        if (source_index(o.id) < 0) grads.erase(it);
      }
    }
    std::vector<Tensor> grad_inputs;
    if (rec->backward_into) {
      sinks.assign(rec->inputs.size(), Tensor());
      for (size_t i = 0; i < rec->inputs.size(); ++i) {
        int s = source_index(rec->inputs[i].id);
        const Tensor* d = destination_of(s);
        // Only an empty destination can take a result (a second contribution is added to it),
        // and only once per op (an op may take the same tensor twice).
        bool first_use = true;
        for (size_t j = 0; j < i; ++j) first_use &= rec->inputs[j].id != rec->inputs[i].id;
        if (d && first_use && !in_destination[static_cast<size_t>(s)] &&
            t.tracked.count(rec->inputs[i].id) && !grads.count(rec->inputs[i].id))
          sinks[i] = *d;
      }
      grad_inputs = rec->backward_into(grad_outputs, sinks);
    } else {
      grad_inputs = rec->backward(grad_outputs);
    }
    LOCKSTEP_CHECK_AS(Internal, grad_inputs.size() == rec->inputs.size(), "backward of '",
                      rec->op_name, "' returned ", grad_inputs.size(), " gradients for ",
                      rec->inputs.size(), " inputs.");
    for (size_t i = 0; i < grad_inputs.size(); ++i) {
      const Tensor& g = grad_inputs[i];
      const auto& in = rec->inputs[i];
      if (!g.defined() || !t.tracked.count(in.id)) continue;
      LOCKSTEP_CHECK_AS(Internal, g.shape() == in.shape, "backward of '", rec->op_name,
                        "' returned a gradient ", g.describe(), " for input ", i, " of shape ",
                        in.shape, ".");
      auto [it, inserted] = grads.emplace(in.id, g);
      if (inserted) continue;
      int s = source_index(in.id);
      if (s >= 0 && sources[static_cast<size_t>(s)].dtype() == DType::float32 &&
          (g.dtype() == DType::bfloat16 || it->second.dtype() == DType::bfloat16)) {
        // A float32 source's bfloat16 contribution (a kernel multiplied as bfloat16, its
        // gradient in a bfloat16 destination) meets another: summed in float32, as the casts'
        // gradients are.
        auto wide = [](const Tensor& t) {
          return t.dtype() == DType::bfloat16 ? t.to(DType::float32) : t;
        };
        it->second = autodiff::accumulate(wide(it->second), wide(g));
      } else if (s >= 0 && in_destination[static_cast<size_t>(s)] &&
                 g.dtype() == it->second.dtype()) {
        autodiff::accumulate_into(it->second, g);
      } else if (g.dtype() == DType::float32 && it->second.dtype() == DType::float32 &&
                 completes_rounded_sum(k, rec->inputs, i)) {
        it->second = ops::add_to_bfloat16_values_forward(it->second, g);  // rounded and marked
      } else {
        it->second = autodiff::accumulate(it->second, g);
      }
    }
    // Move sources' first gradients into their destinations now, so that a later contribution
    // accumulates in place instead of allocating.
    for (size_t i = 0; i < rec->inputs.size(); ++i) {
      int s = source_index(rec->inputs[i].id);
      const Tensor* d = destination_of(s);
      if (!d || in_destination[static_cast<size_t>(s)]) continue;
      auto it = grads.find(rec->inputs[i].id);
      if (it == grads.end() || it->second.dtype() != d->dtype()) continue;
      if (it->second.raw_data() != d->raw_data()) {
        std::memcpy(d->raw_data(), it->second.raw_data(), d->nbytes());
      }
      it->second = *d;
      in_destination[static_cast<size_t>(s)] = 1;
    }
    report_ready(k);
  }
  report_ready(no_record);  // sources no op read: no gradient

  std::vector<Tensor> result;
  result.reserve(sources.size());
  for (size_t i = 0; i < sources.size(); ++i) result.push_back(finalize(i));
  if (!t.persistent) {
    t.records.clear();
    t.records.shrink_to_fit();
  }
  return result;
}

std::vector<Tensor> GradientTape::gradient(const Tensor& target,
                                           const std::vector<Variable>& sources,
                                           const Tensor& output_gradient) {
  return gradient(target, sources, std::vector<Tensor>(), output_gradient);
}

std::vector<Tensor> GradientTape::gradient(const Tensor& target,
                                           const std::vector<Variable>& sources,
                                           const std::vector<Tensor>& destinations,
                                           const Tensor& output_gradient) {
  std::vector<Tensor> values;
  values.reserve(sources.size());
  for (const Variable& v : sources) values.push_back(v.raw_value());
  return gradient(target, values, destinations, output_gradient);
}

namespace autodiff {

bool should_record(std::initializer_list<const Tensor*> inputs) {
  for (GradientTape::Impl* t : tape_stack)
    if (t->recording && t->tracks_any(inputs)) return true;
  return false;
}

bool should_record(const std::vector<Tensor>& inputs) {
  for (GradientTape::Impl* t : tape_stack)
    if (t->recording && t->tracks_any(inputs)) return true;
  return false;
}

namespace {
void record_impl(std::string_view op_name, const std::vector<Tensor>& inputs,
                 const std::vector<Tensor>& outputs, const BackwardFunction& backward,
                 const BackwardIntoFunction& backward_into) {
  for (GradientTape::Impl* t : tape_stack) {
    if (!t->recording || !t->tracks_any(inputs)) continue;
    GradientTape::Impl::Record rec{op_name, {}, {}, backward, backward_into};
    rec.inputs.reserve(inputs.size());
    for (const Tensor& in : inputs) rec.inputs.push_back(info(in));
    for (const Tensor& out : outputs) {
      rec.outputs.push_back(info(out));
      t->tracked.insert(out.id());
    }
    t->records.push_back(std::move(rec));
  }
}
}  // namespace

void note_rounds_output_gradient(const Tensor& output) {
  for (GradientTape::Impl* t : tape_stack) {
    if (!t->recording || t->records.empty()) continue;
    auto& rec = t->records.back();
    for (const auto& o : rec.outputs) {
      if (o.id == output.id()) rec.rounds_gradient_of.push_back(o.id);
    }
  }
}

void record(std::string_view op_name, const std::vector<Tensor>& inputs,
            const std::vector<Tensor>& outputs, BackwardFunction backward) {
  record_impl(op_name, inputs, outputs, backward, {});
}

void record(std::string_view op_name, const std::vector<Tensor>& inputs,
            const std::vector<Tensor>& outputs, BackwardIntoFunction backward) {
  record_impl(op_name, inputs, outputs, {}, backward);
}

void note_variable_read(const Tensor& v) {
  for (GradientTape::Impl* t : tape_stack)
    if (t->recording && t->watch_accessed_variables) t->tracked.insert(v.id());
}

namespace {
void check_accumulable(const Tensor& a, const Tensor& b) {
  LOCKSTEP_CHECK(a.shape() == b.shape() && a.dtype() == b.dtype(), "accumulate: gradients ",
                 a.describe(), " and ", b.describe(), " differ in shape or dtype.");
}
}  // namespace

void accumulate_into(const Tensor& a, const Tensor& b) {
  check_accumulable(a, b);
  ops::add_into(a, b);
}

Tensor accumulate(const Tensor& a, const Tensor& b) {
  check_accumulable(a, b);
  return ops::add_forward(a, b);
}

}  // namespace autodiff

Tensor stop_gradient(const Tensor& x) {
  return x.reshape(x.shape());
}

}  // namespace lockstep
