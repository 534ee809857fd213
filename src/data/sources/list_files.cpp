// Dataset::list_files and Dataset::from_strings: a finite list of byte strings.
#include <glob.h>

#include <algorithm>

#include "../internal.h"
#include "lockstep/core/check.h"
#include "lockstep/data/bytes.h"

namespace lockstep {
namespace {

class StringsIterator : public data_internal::IteratorImpl {
 public:
  explicit StringsIterator(const std::vector<std::string>* strings) : strings_(strings) {}
  bool next(Element& out) override {
    if (index_ >= strings_->size()) return false;
    out.assign(1, bytes_tensor((*strings_)[index_++]));
    return true;
  }
  int64_t skip(int64_t n) override {
    size_t k = std::min(static_cast<size_t>(std::max<int64_t>(n, 0)), strings_->size() - index_);
    index_ += k;
    return static_cast<int64_t>(k);
  }

 private:
  const std::vector<std::string>* strings_;
  size_t index_ = 0;
};

// Not a RandomAccess: its elements differ in length, so batch could not gather them into rows.
class StringsNode : public data_internal::Node {
 public:
  StringsNode(std::vector<std::string> strings, std::string name)
      : strings_(std::move(strings)), name_(std::move(name)) {}
  std::unique_ptr<data_internal::IteratorImpl> make_iterator(
      const data_internal::IterContext&) const override {
    return std::make_unique<StringsIterator>(&strings_);
  }
  int64_t cardinality() const override { return static_cast<int64_t>(strings_.size()); }
  ElementSpec element_spec() const override {
    return {TensorSpec{{TensorSpec::kUnknownDim}, DType::uint8}};
  }
  std::string to_string() const override {
    return name_ + "(" + std::to_string(strings_.size()) + ")";
  }

  // Only list_files' lists are files; from_strings holds any strings.
  std::vector<std::string> files() const override {
    return name_ == "ListFiles" ? strings_ : std::vector<std::string>{};
  }
  std::shared_ptr<const data_internal::Node> shard_files(int64_t n, int64_t index) const override {
    if (name_ != "ListFiles") return nullptr;
    return std::make_shared<StringsNode>(data_internal::shard_list(strings_, n, index, name_),
                                         name_);
  }

 private:
  std::vector<std::string> strings_;
  std::string name_;
};

std::vector<std::string> glob_files(const std::string& pattern) {
  glob_t g{};
  int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
  std::vector<std::string> out;
  if (rc == 0) {
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  }
  globfree(&g);
  LOCKSTEP_CHECK_AS(Internal, rc == 0 || rc == GLOB_NOMATCH,
                    "Dataset::list_files: glob failed for pattern '", pattern, "' (code ", rc,
                    ").");
  return out;
}

}  // namespace

Dataset Dataset::from_strings(const std::vector<std::string>& strings) {
  return Dataset(std::make_shared<StringsNode>(strings, "Strings"));
}

Dataset Dataset::list_files(const std::vector<std::string>& patterns, bool shuffle,
                            std::optional<uint64_t> seed) {
  std::vector<std::string> files;
  for (const std::string& p : patterns) {
    std::vector<std::string> f = glob_files(p);
    files.insert(files.end(), f.begin(), f.end());
  }
  std::sort(files.begin(), files.end());
  files.erase(std::unique(files.begin(), files.end()), files.end());
  if (files.empty()) {
    std::string list;
    for (const std::string& p : patterns) list += (list.empty() ? "'" : ", '") + p + "'";
    throw NotFound("Dataset::list_files: no files matched the pattern " + list + ".");
  }
  auto n = static_cast<int64_t>(files.size());
  Dataset ds(std::make_shared<StringsNode>(std::move(files), "ListFiles"));
  return shuffle ? ds.shuffle(n, seed) : ds;
}

Dataset Dataset::list_files(const std::string& pattern, bool shuffle,
                            std::optional<uint64_t> seed) {
  return list_files(std::vector<std::string>{pattern}, shuffle, seed);
}

}  // namespace lockstep
