// Source stages: tensor slices, range, generator, zip.
#include <algorithm>
#include <cstring>

#include "internal.h"
#include "lockstep/core/check.h"

namespace lockstep::data_internal {
namespace {

// ----- iteration over any RandomAccess in index order
class RandomAccessIterator : public IteratorImpl {
 public:
  explicit RandomAccessIterator(std::shared_ptr<const RandomAccess> ra)
      : ra_(std::move(ra)), size_(ra_->size()) {}
  bool next(Element& out) override {
    if (index_ >= size_) return false;
    ra_->get(index_++, out);
    return true;
  }
  int64_t next_rows(const Element& dst, int64_t row, int64_t n) override {
    int64_t k = std::min(n, size_ - index_);
    if (k <= 0) return 0;
    ra_->check_rows(dst);
    ra_->copy_rows(index_, k, dst, row);
    index_ += k;
    return k;
  }
  int64_t skip(int64_t n) override {
    int64_t k = std::clamp<int64_t>(size_ - index_, 0, n);
    index_ += k;
    return k;
  }

 private:
  std::shared_ptr<const RandomAccess> ra_;
  int64_t size_;
  int64_t index_ = 0;
};

// ----- tensor slices
class SlicesAccess : public RandomAccess {
 public:
  explicit SlicesAccess(Element tensors) : tensors_(std::move(tensors)) {
    LOCKSTEP_CHECK(!tensors_.empty(), "Dataset::from_tensor_slices: expected at least one tensor.");
    for (const Tensor& t : tensors_) {
      LOCKSTEP_CHECK(
          t.defined() && t.rank() > 0 && tensors_[0].rank() > 0 && t.dim(0) == tensors_[0].dim(0),
          "Dataset::from_tensor_slices: expected tensors of rank >= 1 with the same "
          "leading dimension. Received ",
          describe(tensors_), ".");
      row_bytes_.push_back(t.nbytes() / static_cast<size_t>(std::max<int64_t>(t.dim(0), 1)));
    }
  }
  int64_t size() const override { return tensors_[0].dim(0); }
  void get(int64_t i, Element& out) const override {
    out.resize(tensors_.size());
    for (size_t c = 0; c < tensors_.size(); ++c) out[c] = tensors_[c].row(i);
  }
  void check_rows(const Element& dst) const override {
    bool ok = dst.size() == tensors_.size();
    for (size_t c = 0; ok && c < dst.size(); ++c) {
      const Tensor& s = tensors_[c];
      ok = dst[c].dtype() == s.dtype() && dst[c].rank() == s.rank();
      for (int i = 1; ok && i < s.rank(); ++i) ok = dst[c].shape()[i] == s.shape()[i];
    }
    if (!ok) {
      thread_local Element tmp;
      get(0, tmp);
      check_element_matches_batch(tmp, dst, "batch");
    }
  }
  void copy_row(int64_t i, const Element& dst, int64_t row) const override {
    copy_rows(i, 1, dst, row);
  }
  void copy_rows(int64_t i, int64_t n, const Element& dst, int64_t row) const override {
    for (size_t c = 0; c < tensors_.size(); ++c) {
      size_t rb = row_bytes_[c];
      std::memcpy(static_cast<char*>(dst[c].raw_data()) + static_cast<size_t>(row) * rb,
                  static_cast<const char*>(tensors_[c].raw_data()) + static_cast<size_t>(i) * rb,
                  rb * static_cast<size_t>(n));
    }
  }
  void gather_rows(std::span<const int64_t> idx, const Element& dst, int64_t row) const override {
    // Rows are scattered over the whole dataset (tens of MB): prefetch rows ahead so that the
    // copies overlap the cache misses instead of waiting on each. Every line a row touches: one
    // that does not start a line spans one more.
    constexpr size_t kAhead = 8;
    for (size_t c = 0; c < tensors_.size(); ++c) {
      size_t rb = row_bytes_[c];
      const char* src = static_cast<const char*>(tensors_[c].raw_data());
      char* out = static_cast<char*>(dst[c].raw_data()) + static_cast<size_t>(row) * rb;
      auto prefetch_row = [&](size_t k) {
        const auto first = reinterpret_cast<uintptr_t>(src + static_cast<size_t>(idx[k]) * rb);
        for (uintptr_t line = first & ~uintptr_t{63}; line < first + rb; line += 64) {
          __builtin_prefetch(reinterpret_cast<const void*>(line));
        }
      };
      for (size_t k = 0; k < std::min(kAhead, idx.size()); ++k) prefetch_row(k);
      for (size_t k = 0; k < idx.size(); ++k) {
        if (k + kAhead < idx.size()) prefetch_row(k + kAhead);
        std::memcpy(out + k * rb, src + static_cast<size_t>(idx[k]) * rb, rb);
      }
    }
  }
  const Element& tensors() const { return tensors_; }

 private:
  Element tensors_;
  std::vector<size_t> row_bytes_;
};

class SlicesNode : public Node {
 public:
  explicit SlicesNode(const Element& tensors) : ra_(std::make_shared<SlicesAccess>(tensors)) {}
  std::unique_ptr<IteratorImpl> make_iterator(const IterContext&) const override {
    return std::make_unique<RandomAccessIterator>(ra_);
  }
  int64_t cardinality() const override { return ra_->size(); }
  ElementSpec element_spec() const override {
    ElementSpec spec;
    for (const Tensor& t : ra_->tensors()) {
      TensorSpec s = TensorSpec::of(t);
      s.shape.erase(s.shape.begin());
      spec.push_back(s);
    }
    return spec;
  }
  std::shared_ptr<const RandomAccess> random_access() const override { return ra_; }
  std::string to_string() const override {
    return "TensorSlices" + lockstep::to_string(element_spec());
  }

 private:
  std::shared_ptr<const SlicesAccess> ra_;
};

// ----- range
class RangeAccess : public RandomAccess {
 public:
  RangeAccess(int64_t start, int64_t stop, int64_t step) : start_(start), step_(step) {
    LOCKSTEP_CHECK(step != 0, "Dataset::range: step must not be 0.");
    if (step > 0) {
      size_ = stop > start ? (stop - start + step - 1) / step : 0;
    } else {
      size_ = start > stop ? (start - stop - step - 1) / -step : 0;
    }
  }
  int64_t size() const override { return size_; }
  void get(int64_t i, Element& out) const override {
    out.resize(1);
    out[0] = Tensor({}, DType::int64);
    *out[0].data<int64_t>() = start_ + i * step_;
  }
  void check_rows(const Element& dst) const override {
    if (dst.size() != 1 || dst[0].dtype() != DType::int64 || dst[0].rank() != 1) {
      Element tmp;
      get(0, tmp);
      check_element_matches_batch(tmp, dst, "batch");
    }
  }
  void copy_row(int64_t i, const Element& dst, int64_t row) const override {
    dst[0].data<int64_t>()[row] = start_ + i * step_;
  }
  int64_t start_, step_, size_;
};

class RangeNode : public Node {
 public:
  RangeNode(int64_t start, int64_t stop, int64_t step)
      : ra_(std::make_shared<RangeAccess>(start, stop, step)), stop_(stop) {}
  std::unique_ptr<IteratorImpl> make_iterator(const IterContext&) const override {
    return std::make_unique<RandomAccessIterator>(ra_);
  }
  int64_t cardinality() const override { return ra_->size(); }
  ElementSpec element_spec() const override { return {TensorSpec{{}, DType::int64}}; }
  std::shared_ptr<const RandomAccess> random_access() const override { return ra_; }
  std::string to_string() const override {
    return "Range(" + std::to_string(ra_->start_) + ", " + std::to_string(stop_) + ", " +
           std::to_string(ra_->step_) + ")";
  }

 private:
  std::shared_ptr<const RangeAccess> ra_;
  int64_t stop_;
};

// ----- generator
class GeneratorIterator : public IteratorImpl {
 public:
  GeneratorIterator(std::function<std::optional<Element>()> gen, const ElementSpec* spec)
      : gen_(std::move(gen)), spec_(spec) {}
  bool next(Element& out) override {
    if (done_) return false;
    std::optional<Element> e = gen_();
    if (!e) {
      done_ = true;
      return false;
    }
    bool ok = e->size() == spec_->size();
    for (size_t c = 0; ok && c < e->size(); ++c) ok = (*spec_)[c].is_compatible_with((*e)[c]);
    LOCKSTEP_CHECK(ok, "Dataset::from_generator: the generator yielded ", describe(*e),
                   ", which does not match the declared spec ", lockstep::to_string(*spec_), ".");
    out = std::move(*e);
    return true;
  }

 private:
  std::function<std::optional<Element>()> gen_;
  const ElementSpec* spec_;
  bool done_ = false;
};

class GeneratorNode : public Node {
 public:
  GeneratorNode(Dataset::GeneratorFactory factory, ElementSpec spec)
      : factory_(std::move(factory)), spec_(std::move(spec)) {
    LOCKSTEP_CHECK(factory_, "Dataset::from_generator: the factory is empty.");
  }
  std::unique_ptr<IteratorImpl> make_iterator(const IterContext&) const override {
    auto gen = factory_();
    LOCKSTEP_CHECK(gen, "Dataset::from_generator: the factory returned no function.");
    return std::make_unique<GeneratorIterator>(std::move(gen), &spec_);
  }
  int64_t cardinality() const override { return Dataset::kUnknown; }
  ElementSpec element_spec() const override { return spec_; }
  std::string to_string() const override { return "Generator" + lockstep::to_string(spec_); }

 private:
  Dataset::GeneratorFactory factory_;
  ElementSpec spec_;
};

// ----- zip
class ZipIterator : public IteratorImpl {
 public:
  explicit ZipIterator(std::vector<std::unique_ptr<IteratorImpl>> inputs)
      : inputs_(std::move(inputs)), parts_(inputs_.size()) {}
  bool next(Element& out) override {
    if (done_) return false;
    out.clear();
    for (size_t i = 0; i < inputs_.size(); ++i) {
      if (!inputs_[i]->next(parts_[i])) {
        done_ = true;
        return false;
      }
      for (Tensor& t : parts_[i]) out.push_back(std::move(t));
    }
    return true;
  }
  int64_t skip(int64_t n) override {
    if (done_) return 0;
    int64_t got = n;
    for (auto& in : inputs_) got = std::min(got, in->skip(got));
    if (got < n) done_ = true;
    return got;
  }

 private:
  std::vector<std::unique_ptr<IteratorImpl>> inputs_;
  std::vector<Element> parts_;
  bool done_ = false;
};

class ZipNode : public Node {
 public:
  explicit ZipNode(std::vector<std::shared_ptr<const Node>> inputs) : inputs_(std::move(inputs)) {
    LOCKSTEP_CHECK(!inputs_.empty(), "Dataset::zip: expected at least one dataset.");
  }
  std::unique_ptr<IteratorImpl> make_iterator(const IterContext& ctx) const override {
    std::vector<std::unique_ptr<IteratorImpl>> its;
    for (size_t i = 0; i < inputs_.size(); ++i) {
      its.push_back(inputs_[i]->make_iterator({mix_key(ctx.key, i)}));
    }
    return std::make_unique<ZipIterator>(std::move(its));
  }
  int64_t cardinality() const override {
    int64_t result = Dataset::kInfinite;
    for (auto& in : inputs_) {
      int64_t c = in->cardinality();
      if (c == Dataset::kUnknown) return Dataset::kUnknown;
      if (c >= 0) result = result < 0 ? c : std::min(result, c);
    }
    return result;
  }
  ElementSpec element_spec() const override {
    ElementSpec spec;
    for (auto& in : inputs_) {
      ElementSpec s = in->element_spec();
      spec.insert(spec.end(), s.begin(), s.end());
    }
    return spec;
  }
  std::string to_string() const override {
    std::string s = "Zip(";
    for (size_t i = 0; i < inputs_.size(); ++i) s += (i ? ", " : "") + inputs_[i]->to_string();
    return s + ")";
  }

  std::vector<std::shared_ptr<const Node>> inputs() const override { return inputs_; }
  std::shared_ptr<const Node> with_inputs(
      std::vector<std::shared_ptr<const Node>> in) const override {
    return make_zip(std::move(in));
  }

 private:
  std::vector<std::shared_ptr<const Node>> inputs_;
};

}  // namespace

std::unique_ptr<IteratorImpl> make_random_access_iterator(std::shared_ptr<const RandomAccess> ra) {
  return std::make_unique<RandomAccessIterator>(std::move(ra));
}

std::shared_ptr<const Node> make_tensor_slices(const Element& tensors) {
  return std::make_shared<SlicesNode>(tensors);
}
std::shared_ptr<const Node> make_range(int64_t start, int64_t stop, int64_t step) {
  return std::make_shared<RangeNode>(start, stop, step);
}
std::shared_ptr<const Node> make_generator(Dataset::GeneratorFactory factory, ElementSpec spec) {
  return std::make_shared<GeneratorNode>(std::move(factory), std::move(spec));
}
std::shared_ptr<const Node> make_zip(std::vector<std::shared_ptr<const Node>> inputs) {
  return std::make_shared<ZipNode>(std::move(inputs));
}

}  // namespace lockstep::data_internal
