#include "lockstep/autodiff/gradient_tape.h"

#include <algorithm>
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
    BackwardFunction backward;
  };

  bool persistent;
  bool watch_accessed_variables;
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

template <typename T>
void add_loop(const Tensor& out, const Tensor& a, const Tensor& b) {
  T* o = out.data<T>();
  const T* x = a.data<T>();
  const T* y = b.data<T>();
  for (int64_t i = 0, n = out.num_elements(); i < n; ++i) o[i] = x[i] + y[i];
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
  Impl& t = *impl_;
  if (t.used && !t.persistent) {
    throw FailedPrecondition(
        "GradientTape::gradient can only be called once on a non-persistent tape. Create the "
        "tape with persistent = true to compute several gradients.");
  }
  t.used = true;
  // Backward functions must not append to the record list this loop walks.
  struct Pause {
    Impl& t;
    bool was;
    ~Pause() { t.recording = was; }
  } pause{t, t.recording};
  t.recording = false;
  if (!target.defined()) throw InvalidArgument("GradientTape::gradient: the target is undefined.");
  Tensor seed = output_gradient;
  if (seed.defined()) {
    if (!(seed.shape() == target.shape()) || seed.dtype() != target.dtype()) {
      throw InvalidArgument("GradientTape::gradient: output_gradient " + seed.describe() +
                            " does not match the target " + target.describe() + ".");
    }
  } else {
    seed = Tensor::ones(target.shape(), target.dtype());
  }

  std::unordered_set<uint64_t> source_ids;
  for (const Tensor& s : sources) source_ids.insert(s.id());

  std::unordered_map<uint64_t, Tensor> grads;
  grads.emplace(target.id(), seed);
  std::vector<Tensor> grad_outputs;
  for (auto rec = t.records.rbegin(); rec != t.records.rend(); ++rec) {
    bool any = false;
    for (const auto& o : rec->outputs) any |= grads.count(o.id) > 0;
    if (!any) continue;
    grad_outputs.clear();
    for (const auto& o : rec->outputs) {
      auto it = grads.find(o.id);
      if (it == grads.end()) {
        grad_outputs.push_back(Tensor::zeros(o.shape, o.dtype));
      } else {
        grad_outputs.push_back(it->second);
        // Intermediate gradients are dropped as soon as they are consumed to bound memory.
        if (!source_ids.count(o.id)) grads.erase(it);
      }
    }
    std::vector<Tensor> grad_inputs = rec->backward(grad_outputs);
    if (grad_inputs.size() != rec->inputs.size()) {
      throw Internal("backward of '" + std::string(rec->op_name) + "' returned " +
                     std::to_string(grad_inputs.size()) + " gradients for " +
                     std::to_string(rec->inputs.size()) + " inputs.");
    }
    for (size_t i = 0; i < grad_inputs.size(); ++i) {
      const Tensor& g = grad_inputs[i];
      const auto& in = rec->inputs[i];
      if (!g.defined() || !t.tracked.count(in.id)) continue;
      if (!(g.shape() == in.shape)) {
        throw Internal("backward of '" + std::string(rec->op_name) + "' returned a gradient " +
                       g.describe() + " for input " + std::to_string(i) + " of shape " +
                       in.shape.to_string() + ".");
      }
      auto [it, inserted] = grads.emplace(in.id, g);
      if (!inserted) it->second = autodiff::accumulate(it->second, g);
    }
  }

  std::vector<Tensor> result;
  result.reserve(sources.size());
  for (const Tensor& s : sources) {
    auto it = grads.find(s.id());
    result.push_back(it == grads.end() ? Tensor() : it->second);
  }
  if (!t.persistent) {
    t.records.clear();
    t.records.shrink_to_fit();
  }
  return result;
}

std::vector<Tensor> GradientTape::gradient(const Tensor& target,
                                           const std::vector<Variable>& sources,
                                           const Tensor& output_gradient) {
  std::vector<Tensor> values;
  values.reserve(sources.size());
  for (const Variable& v : sources) values.push_back(v.raw_value());
  return gradient(target, values, output_gradient);
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

void record(std::string_view op_name, const std::vector<Tensor>& inputs,
            const std::vector<Tensor>& outputs, BackwardFunction backward) {
  for (GradientTape::Impl* t : tape_stack) {
    if (!t->recording || !t->tracks_any(inputs)) continue;
    GradientTape::Impl::Record rec{op_name, {}, {}, backward};
    rec.inputs.reserve(inputs.size());
    for (const Tensor& in : inputs) rec.inputs.push_back(info(in));
    for (const Tensor& out : outputs) {
      rec.outputs.push_back(info(out));
      t->tracked.insert(out.id());
    }
    t->records.push_back(std::move(rec));
  }
}

void note_variable_read(const Tensor& v) {
  for (GradientTape::Impl* t : tape_stack)
    if (t->recording && t->watch_accessed_variables) t->tracked.insert(v.id());
}

Tensor accumulate(const Tensor& a, const Tensor& b) {
  if (!(a.shape() == b.shape()) || a.dtype() != b.dtype()) {
    throw InvalidArgument("accumulate: gradients " + a.describe() + " and " + b.describe() +
                          " differ in shape or dtype.");
  }
  Tensor out(a.shape(), a.dtype());
  switch (a.dtype()) {
    case DType::float32:
      add_loop<float>(out, a, b);
      break;
    case DType::float64:
      add_loop<double>(out, a, b);
      break;
    default: {
      Tensor wide(a.shape(), DType::float32);
      add_loop<float>(wide, a.to(DType::float32), b.to(DType::float32));
      return wide.to(a.dtype());
    }
  }
  return out;
}

}  // namespace autodiff

Tensor stop_gradient(const Tensor& x) {
  return x.reshape(x.shape());
}

}  // namespace lockstep
