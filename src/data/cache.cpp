// cache(): in memory, or in a file that later runs reuse.
//
// File format (native byte order; the file is a cache, not an interchange format):
//   "LSCACHE1"
//   per element:  u32 components, then per component: u8 dtype, u8 rank, i64 dims[rank], data
//   trailer:      u32 0xFFFFFFFF, i64 element count
// A file is only ever renamed into place after a complete pass, so a file without its trailer is
// corrupt, not in progress.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <mutex>

#include "internal.h"
#include "lockstep/core/atomic_file.h"
#include "lockstep/core/check.h"

namespace lockstep::data_internal {
namespace {

constexpr char kMagic[8] = {'L', 'S', 'C', 'A', 'C', 'H', 'E', '1'};
constexpr uint32_t kTrailer = 0xFFFFFFFFu;

// ----- memory
struct MemoryCache {
  std::mutex mu;
  std::shared_ptr<const std::vector<Element>> elements;  // set after the first complete pass
};

class CachedIterator : public IteratorImpl {
 public:
  explicit CachedIterator(std::shared_ptr<const std::vector<Element>> elements)
      : elements_(std::move(elements)) {}
  bool next(Element& out) override {
    if (index_ >= elements_->size()) return false;
    out = (*elements_)[index_++];
    return true;
  }
  int64_t skip(int64_t n) override {
    int64_t k = std::min<int64_t>(n, static_cast<int64_t>(elements_->size() - index_));
    index_ += static_cast<size_t>(k);
    return k;
  }

 private:
  std::shared_ptr<const std::vector<Element>> elements_;
  size_t index_ = 0;
};

class MemoryCacheWriter : public IteratorImpl {
 public:
  MemoryCacheWriter(std::unique_ptr<IteratorImpl> input, std::shared_ptr<MemoryCache> cache)
      : input_(std::move(input)), cache_(std::move(cache)) {}
  bool next(Element& out) override {
    if (done_) return false;
    if (!input_->next(out)) {
      done_ = true;
      std::lock_guard lock(cache_->mu);
      if (!cache_->elements) {
        cache_->elements = std::make_shared<const std::vector<Element>>(std::move(seen_));
      }
      return false;
    }
    seen_.push_back(out);
    return true;
  }

 private:
  std::unique_ptr<IteratorImpl> input_;
  std::shared_ptr<MemoryCache> cache_;
  std::vector<Element> seen_;
  bool done_ = false;
};

class MemoryCacheNode : public Node {
 public:
  explicit MemoryCacheNode(std::shared_ptr<const Node> input)
      : input_(std::move(input)), cache_(std::make_shared<MemoryCache>()) {}
  std::unique_ptr<IteratorImpl> make_iterator(const IterContext& ctx) const override {
    {
      std::lock_guard lock(cache_->mu);
      if (cache_->elements) return std::make_unique<CachedIterator>(cache_->elements);
    }
    return std::make_unique<MemoryCacheWriter>(input_->make_iterator(ctx), cache_);
  }
  int64_t cardinality() const override { return input_->cardinality(); }
  ElementSpec element_spec() const override { return input_->element_spec(); }
  std::string to_string() const override { return input_->to_string() + " -> Cache"; }

  std::vector<std::shared_ptr<const Node>> inputs() const override { return {input_}; }
  std::shared_ptr<const Node> with_inputs(
      std::vector<std::shared_ptr<const Node>> in) const override {
    return make_memory_cache(std::move(in[0]));
  }

 private:
  std::shared_ptr<const Node> input_;
  std::shared_ptr<MemoryCache> cache_;
};

// ----- file
class FileReader : public IteratorImpl {
 public:
  explicit FileReader(std::string path) : path_(std::move(path)) {
    file_ = std::fopen(path_.c_str(), "rb");
    LOCKSTEP_CHECK_AS(NotFound, file_, "Dataset::cache: cannot open the cache file ", path_, ".");
    char magic[8];
    read(magic, 8);
    if (std::memcmp(magic, kMagic, 8) != 0) fail("bad magic number (not a Lockstep cache file)");
  }
  ~FileReader() override {
    if (file_) std::fclose(file_);
  }
  bool next(Element& out) override {
    if (done_) return false;
    uint32_t n;
    read(&n, 4);
    if (n == kTrailer) {
      int64_t count;
      read(&count, 8);
      if (count != count_)
        fail("trailer counts " + std::to_string(count) + " elements, read " +
             std::to_string(count_));
      done_ = true;
      return false;
    }
    if (n > 1024) fail("implausible component count " + std::to_string(n));
    out.resize(n);
    for (uint32_t c = 0; c < n; ++c) {
      uint8_t head[2];
      read(head, 2);
      if (head[0] > static_cast<uint8_t>(DType::uint8) || head[1] > Shape::kMaxRank) {
        fail("bad dtype or rank");
      }
      int64_t dims[Shape::kMaxRank];
      read(dims, 8 * head[1]);
      for (int i = 0; i < head[1]; ++i) {
        if (dims[i] < 0 || dims[i] > (int64_t{1} << 40)) fail("bad dimension");
      }
      Tensor t(Shape(std::span<const int64_t>(dims, head[1])), static_cast<DType>(head[0]));
      read(t.raw_data(), t.nbytes());
      out[c] = std::move(t);
    }
    ++count_;
    return true;
  }

 private:
  void read(void* dst, size_t n) {
    if (n && std::fread(dst, 1, n, file_) != n)
      fail("truncated (needed " + std::to_string(n) + " more bytes)");
    offset_ += n;
  }
  [[noreturn]] void fail(const std::string& what) {
    throw DataLoss("Dataset::cache: the cache file " + path_ + " is corrupt at byte offset " +
                   std::to_string(offset_) + ": " + what + ". Delete it to rebuild the cache.");
  }
  std::string path_;
  std::FILE* file_ = nullptr;
  uint64_t offset_ = 0;
  int64_t count_ = 0;
  bool done_ = false;
};

class FileWriter : public IteratorImpl {
 public:
  // An incomplete pass leaves no cache behind: the file exists only once every element is in.
  FileWriter(std::unique_ptr<IteratorImpl> input, const std::string& path)
      : input_(std::move(input)),
        file_(std::make_unique<AtomicFileWriter>(path, "Dataset::cache")) {
    write(kMagic, 8);
  }
  bool next(Element& out) override {
    if (!file_) return false;
    if (!input_->next(out)) {
      write(&kTrailer, 4);
      write(&count_, 8);
      file_->commit();
      file_.reset();
      return false;
    }
    uint32_t n = static_cast<uint32_t>(out.size());
    write(&n, 4);
    for (const Tensor& t : out) {
      uint8_t head[2] = {static_cast<uint8_t>(t.dtype()), static_cast<uint8_t>(t.rank())};
      write(head, 2);
      write(t.shape().dims().data(), 8 * static_cast<size_t>(t.rank()));
      write(t.raw_data(), t.nbytes());
    }
    ++count_;
    return true;
  }

 private:
  void write(const void* p, size_t n) { file_->write(p, n); }
  std::unique_ptr<IteratorImpl> input_;
  std::unique_ptr<AtomicFileWriter> file_;
  int64_t count_ = 0;
};

class FileCacheNode : public Node {
 public:
  FileCacheNode(std::shared_ptr<const Node> input, std::string path)
      : input_(std::move(input)), path_(std::move(path)) {}
  std::unique_ptr<IteratorImpl> make_iterator(const IterContext& ctx) const override {
    if (::access(path_.c_str(), F_OK) == 0) return std::make_unique<FileReader>(path_);
    return std::make_unique<FileWriter>(input_->make_iterator(ctx), path_);
  }
  int64_t cardinality() const override { return input_->cardinality(); }
  ElementSpec element_spec() const override { return input_->element_spec(); }
  std::string to_string() const override {
    return input_->to_string() + " -> Cache(" + path_ + ")";
  }

  std::vector<std::shared_ptr<const Node>> inputs() const override { return {input_}; }
  std::shared_ptr<const Node> with_inputs(
      std::vector<std::shared_ptr<const Node>> in) const override {
    return make_file_cache(std::move(in[0]), path_);
  }

 private:
  std::shared_ptr<const Node> input_;
  std::string path_;
};

}  // namespace

std::shared_ptr<const Node> make_memory_cache(std::shared_ptr<const Node> input) {
  return std::make_shared<MemoryCacheNode>(std::move(input));
}
std::shared_ptr<const Node> make_file_cache(std::shared_ptr<const Node> input, std::string path) {
  return std::make_shared<FileCacheNode>(std::move(input), std::move(path));
}

}  // namespace lockstep::data_internal
