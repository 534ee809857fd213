#pragma once
// Pipeline machinery shared by the stages (private to src/data).
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "lockstep/data/dataset.h"

namespace lockstep::data_internal {

// Passed down when iterators are made. `key` identifies the iteration (top-level iterator number,
// mixed with the epoch by each repeat above), so shuffle can reshuffle per epoch deterministically.
struct IterContext {
  uint64_t key = 0;
};

uint64_t mix_key(uint64_t key, uint64_t value);

// A finite dataset whose element i can be produced directly. Lets shuffle permute indices instead
// of elements and batch gather rows straight into the batch tensors.
class RandomAccess {
 public:
  virtual ~RandomAccess() = default;
  virtual int64_t size() const = 0;
  // Must be safe to call concurrently.
  virtual void get(int64_t i, Element& out) const = 0;
  // Throws unless element rows can be copied into the batch tensors `dst` (checked once per
  // batch, so that copy_row need not check).
  virtual void check_rows(const Element& dst) const;
  // Copies element i into row `row` of each batch tensor in `dst`.
  virtual void copy_row(int64_t i, const Element& dst, int64_t row) const;
  // Copies elements [i, i + n) into rows [row, row + n).
  virtual void copy_rows(int64_t i, int64_t n, const Element& dst, int64_t row) const {
    for (int64_t k = 0; k < n; ++k) copy_row(i + k, dst, row + k);
  }
  // Copies elements idx[0], idx[1], ... into rows [row, row + idx.size()) (a shuffled gather).
  virtual void gather_rows(std::span<const int64_t> idx, const Element& dst, int64_t row) const {
    for (size_t k = 0; k < idx.size(); ++k) copy_row(idx[k], dst, row + static_cast<int64_t>(k));
  }
};

class IteratorImpl {
 public:
  virtual ~IteratorImpl() = default;
  // Writes the next element into `out`; false at the end (and on every later call).
  virtual bool next(Element& out) = 0;
  // Copies up to n next elements into rows [row, row + n) of the batch tensors `dst` and returns
  // how many it copied (fewer only at the end). Stages that can gather rows directly override it.
  virtual int64_t next_rows(const Element& dst, int64_t row, int64_t n);
  // Advances past up to n elements, returning how many it skipped.
  virtual int64_t skip(int64_t n);

 protected:
  Element scratch_;
};

class Node : public std::enable_shared_from_this<Node> {
 public:
  virtual ~Node() = default;
  // The stages this one reads from (none for a source), and this stage with the same parameters
  // over other inputs: how pipeline rewrites (Dataset::shard_files) rebuild a pipeline. Every
  // stage with inputs overrides both; a source keeps the defaults.
  virtual std::vector<std::shared_ptr<const Node>> inputs() const { return {}; }
  virtual std::shared_ptr<const Node> with_inputs(
      std::vector<std::shared_ptr<const Node>> inputs) const;
  // File sources and list_files stages: their files, and themselves reading only files j with
  // j mod n == index. Others: empty and nullptr.
  virtual std::vector<std::string> files() const { return {}; }
  // True for a repeat() with a negative count (data/cardinality.h).
  virtual bool repeats_forever() const { return false; }
  virtual std::shared_ptr<const Node> shard_files(int64_t /*n*/, int64_t /*index*/) const {
    return nullptr;
  }
  virtual std::unique_ptr<IteratorImpl> make_iterator(const IterContext& ctx) const = 0;
  virtual int64_t cardinality() const = 0;
  virtual ElementSpec element_spec() const = 0;
  virtual std::shared_ptr<const RandomAccess> random_access() const { return nullptr; }
  virtual std::string to_string() const = 0;

  // Number of top-level iterators made so far (advances the reshuffle order).
  mutable std::atomic<uint64_t> iterations{0};
};

// Copies the rows of `src` into row `row` of the batch tensors; throws InvalidArgument naming the
// shapes when a component does not fit.
void copy_element_into_rows(const Element& src, const Element& dst, int64_t row, const char* op);
void check_element_matches_batch(const Element& src, const Element& dst, const char* op);

// Stage constructors (one source file each family).
std::shared_ptr<const Node> make_tensor_slices(const Element& tensors);
std::shared_ptr<const Node> make_range(int64_t start, int64_t stop, int64_t step);
std::shared_ptr<const Node> make_generator(Dataset::GeneratorFactory factory, ElementSpec spec);
std::shared_ptr<const Node> make_zip(std::vector<std::shared_ptr<const Node>> inputs);
std::shared_ptr<const Node> make_map(std::shared_ptr<const Node> input, Dataset::MapFn fn,
                                     MapOptions options);
std::shared_ptr<const Node> make_filter(std::shared_ptr<const Node> input,
                                        Dataset::Predicate predicate);
std::shared_ptr<const Node> make_shuffle(std::shared_ptr<const Node> input, int64_t buffer_size,
                                         uint64_t seed, bool reshuffle);
std::shared_ptr<const Node> make_repeat(std::shared_ptr<const Node> input, int64_t count);
std::shared_ptr<const Node> make_batch(std::shared_ptr<const Node> input, int64_t batch_size,
                                       bool drop_remainder);
std::shared_ptr<const Node> make_unbatch(std::shared_ptr<const Node> input);
std::shared_ptr<const Node> make_prefetch(std::shared_ptr<const Node> input, int64_t buffer_size);
std::shared_ptr<const Node> make_memory_cache(std::shared_ptr<const Node> input);
std::shared_ptr<const Node> make_file_cache(std::shared_ptr<const Node> input, std::string path);
std::shared_ptr<const Node> make_interleave(std::shared_ptr<const Node> input,
                                            Dataset::InterleaveFn fn, int64_t cycle_length,
                                            int64_t block_length, bool parallel);
std::shared_ptr<const Node> make_take(std::shared_ptr<const Node> input, int64_t count);
std::shared_ptr<const Node> make_skip(std::shared_ptr<const Node> input, int64_t count);
std::shared_ptr<const Node> make_shard(std::shared_ptr<const Node> input, int64_t num_shards,
                                       int64_t index);

// Files j of `files` with j mod n == index; InvalidArgument naming `stage` when there are fewer
// files than shards.
std::vector<std::string> shard_list(const std::vector<std::string>& files, int64_t n, int64_t index,
                                    const std::string& stage);

// Iterator over a RandomAccess in index order [begin, end) with stride.
std::unique_ptr<IteratorImpl> make_random_access_iterator(std::shared_ptr<const RandomAccess> ra);

}  // namespace lockstep::data_internal
