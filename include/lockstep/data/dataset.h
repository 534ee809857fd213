#pragma once
// Dataset: a lazy, composable input pipeline in the spirit of tf.data.
//
//   auto [train, test] = datasets::fashion_mnist::load_data();
//   auto& [x, y] = train;                                   // uint8[60000, 28, 28], uint8[60000]
//   Dataset ds = Dataset::from_tensor_slices({x, y})        // zero-copy views of the rows
//                    .shuffle(60000, /*seed=*/42)
//                    .repeat()
//                    .batch(256)                            // uint8[256, 28, 28], uint8[256]
//                    .map(scale_to_float)                   // a map over whole batches is cheap
//                    .prefetch(Dataset::AUTOTUNE);          // background thread
//   for (Element& batch : ds) { ... }                       // or: auto it = ds.make_iterator();
//
// A Dataset is a cheap-to-copy handle on an immutable pipeline description; nothing runs until an
// iterator is made. Each iterator owns its own state (and background threads, for prefetch and
// parallel map); destroying it stops and joins them, whatever the consumer's position.
//
// Determinism: with fixed seeds, every iterator of the same pipeline yields the same sequence,
// parallel map included (results come back in input order unless `deterministic = false`).
// Functions passed to map/filter must be pure for that to hold, and must be safe to call from
// several threads at once when num_parallel_calls != 0.
//
// Cardinality: a count of elements, or kInfinite (-1), or kUnknown (-2), as tf.data.
// See docs/data.md for the AUTOTUNE algorithm and the iterator state.
#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/data/element.h"

namespace lockstep {

namespace data_internal {
class Node;
class IteratorImpl;
}  // namespace data_internal

// A saved iterator position: which iteration of the dataset this is (it selects the shuffle order
// when reshuffling) and how many elements were already produced. Restoring replays the pipeline
// cheaply: slices, range, shuffle, repeat, batch, take, skip, shard and (pure) map stages skip
// without copying or calling map functions; filter, generator and file cache stages re-read.
struct IteratorState {
  uint64_t iteration = 0;
  int64_t position = 0;
  friend bool operator==(const IteratorState&, const IteratorState&) = default;
};

class Iterator {
 public:
  Iterator(Iterator&&) noexcept;
  Iterator& operator=(Iterator&&) noexcept;
  ~Iterator();

  // The next element, or nullopt at the end of the dataset.
  std::optional<Element> next();
  // Same, writing into `out` (whose capacity is reused: no allocation for the tuple itself).
  bool next(Element& out);
  // Position to pass to Dataset::make_iterator(state) to continue from here.
  IteratorState state() const { return {iteration_, position_}; }

 private:
  friend class Dataset;
  Iterator(std::shared_ptr<const data_internal::Node> node,
           std::unique_ptr<data_internal::IteratorImpl> impl, uint64_t iteration);
  // Keeps the pipeline alive: stage iterators refer to their stage's function and parameters.
  std::shared_ptr<const data_internal::Node> node_;
  std::unique_ptr<data_internal::IteratorImpl> impl_;
  uint64_t iteration_ = 0;
  int64_t position_ = 0;
};

struct MapOptions {
  // 0: run in the caller's thread. n > 0: n worker threads. Dataset::AUTOTUNE: up to one worker
  // per core, the number in use chosen from the measured function and consumer times.
  int64_t num_parallel_calls = 0;
  // false lets a parallel map return results as they complete instead of in input order.
  bool deterministic = true;
  // Output spec if known; otherwise element_spec() applies the function to the first element.
  std::optional<ElementSpec> output_spec;
};

class Dataset {
 public:
  static constexpr int64_t AUTOTUNE = -1;
  static constexpr int64_t kInfinite = -1;
  static constexpr int64_t kUnknown = -2;

  using MapFn = std::function<Element(const Element&)>;
  using Predicate = std::function<bool(const Element&)>;
  // Called once per iterator; returns the function that yields that iterator's elements.
  using GeneratorFactory = std::function<std::function<std::optional<Element>()>()>;
  // interleave's function: the dataset to read for one input element (e.g. one file name).
  using InterleaveFn = std::function<Dataset(const Element&)>;

  // ----- sources
  // Element i is (t[i] for t in tensors): views of the rows, no copy. All tensors need rank >= 1
  // and the same leading dimension.
  static Dataset from_tensor_slices(const Element& tensors);
  static Dataset from_tensor_slices(const Tensor& tensor) {
    return from_tensor_slices(Element{tensor});
  }
  // Elements from a generator; `spec` describes them (checked on every element).
  static Dataset from_generator(GeneratorFactory factory, ElementSpec spec);
  // Scalar int64 elements start, start + step, ... up to stop (exclusive), as Python's range.
  static Dataset range(int64_t start, int64_t stop, int64_t step = 1);
  static Dataset range(int64_t stop) { return range(0, stop); }
  // Elements are the concatenation of the inputs' tuples; ends with the shortest input.
  static Dataset zip(const std::vector<Dataset>& datasets);
  // The files matching a glob pattern (glob(3): *, ?, [a-z]; a directory part may hold wildcards
  // too), each a byte string (uint8[n], see data/bytes.h), in sorted order; with `shuffle`, in an
  // order drawn from `seed` (reshuffled each iteration; from std::random_device without a seed)
  // as tf.data.Dataset.list_files, whose `shuffle` also defaults to true. NotFound when nothing
  // matches. The pattern is expanded once, here. Cardinality: the number of files.
  static Dataset list_files(const std::string& pattern, bool shuffle = true,
                            std::optional<uint64_t> seed = std::nullopt);
  static Dataset list_files(const std::vector<std::string>& patterns, bool shuffle = true,
                            std::optional<uint64_t> seed = std::nullopt);
  // Byte-string elements (uint8[n]) holding `strings`, in order (e.g. explicit file names).
  static Dataset from_strings(const std::vector<std::string>& strings);

  // ----- transformations (each returns a new Dataset; this one is unchanged)
  Dataset map(MapFn fn, int64_t num_parallel_calls = 0, bool deterministic = true) const;
  Dataset map(MapFn fn, MapOptions options) const;
  Dataset filter(Predicate predicate) const;
  // Fills a buffer of `buffer_size` elements and draws from it uniformly (tf.data's algorithm);
  // buffer_size >= cardinality gives a uniform permutation. Without a seed the order is seeded
  // from std::random_device. With reshuffle_each_iteration, every epoch of repeat() (and every
  // new iterator of this dataset) gets a different order, still deterministic for a fixed seed.
  Dataset shuffle(int64_t buffer_size, std::optional<uint64_t> seed = std::nullopt,
                  bool reshuffle_each_iteration = true) const;
  // count < 0 repeats forever. Repeating an empty dataset yields nothing (no endless loop).
  Dataset repeat(int64_t count = -1) const;
  // Stacks `batch_size` consecutive elements: component [d...] becomes [batch_size, d...], copied
  // row by row into one new contiguous tensor. Elements must agree in shape and dtype. Without
  // drop_remainder the last batch may be smaller.
  Dataset batch(int64_t batch_size, bool drop_remainder = false) const;
  // tf.data's interleave: keeps `cycle_length` datasets fn(x) open for consecutive input elements
  // x and takes `block_length` elements from each in turn; a dataset that ends is replaced by the
  // next input element's (the slot's turn passes, as in tf.data). cycle_length AUTOTUNE: one per
  // core. With num_parallel_calls != 0 each open dataset is read ahead by a background thread
  // (prefetch of max(block_length, 2) elements), so reading and decoding the cycle's files overlap;
  // the output order is the same as without it. `deterministic = false` is accepted and keeps that
  // order (tf.data allows, but does not require, returning ready elements first).
  // Cardinality unknown; the element spec is that of fn(first input element).
  Dataset interleave(InterleaveFn fn, int64_t cycle_length = AUTOTUNE, int64_t block_length = 1,
                     int64_t num_parallel_calls = 0, bool deterministic = true) const;
  // Splits each element along its leading dimension (every component must have the same one).
  Dataset unbatch() const;
  // A background thread keeps up to buffer_size elements ready (AUTOTUNE: sized from measured
  // producer and consumer rates, see docs/data.md).
  Dataset prefetch(int64_t buffer_size) const;
  // Keeps the elements of the first complete pass in memory; later iterations read them.
  Dataset cache() const;
  // Same with a file: the first complete pass writes `path` (via a temporary file renamed when
  // the pass completes); any later iterator, in this process or the next run, reads it.
  Dataset cache(const std::string& path) const;
  Dataset take(int64_t count) const;  // count < 0: all
  Dataset skip(int64_t count) const;  // count < 0: all
  // Element i goes to shard i mod num_shards (as tf.data); this dataset is shard `index`.
  Dataset shard(int64_t num_shards, int64_t index) const;

  // ----- information
  int64_t cardinality() const;
  // Shapes and dtypes of the elements; unknown dimensions are -1 (e.g. the batch dimension).
  ElementSpec element_spec() const;
  // The pipeline, e.g. "TensorSlices -> Shuffle(60000) -> Repeat(-1) -> Batch(256)".
  std::string to_string() const;
  // The files this pipeline reads: the lists of its list_files stages and of its file sources
  // (TFRecordDataset, TextLineDataset, CsvDataset) read directly, in pipeline order. Empty for
  // an in-memory pipeline.
  std::vector<std::string> input_files() const;

  // ----- rewrites
  // tf.data's AutoShardPolicy::FILE rewrite: the same pipeline in which every list_files stage
  // and every file source keeps only the files j with j mod num_shards == index (of its sorted
  // list, before any shuffle). InvalidArgument when the pipeline reads no files or a file list
  // has fewer files than num_shards (a shard would be empty).
  Dataset shard_files(int64_t num_shards, int64_t index) const;

  // ----- iteration
  // Each call starts a new iteration (which advances the reshuffle order).
  Iterator make_iterator() const;
  // Resumes from a saved position (same pipeline, same seeds).
  Iterator make_iterator(const IteratorState& state) const;

  class RangeIterator {
   public:
    using value_type = Element;
    using difference_type = std::ptrdiff_t;
    explicit RangeIterator(Iterator it);
    Element& operator*() { return current_; }
    RangeIterator& operator++();
    void operator++(int) { ++*this; }
    bool operator==(std::default_sentinel_t) const { return done_; }

   private:
    std::unique_ptr<Iterator> it_;
    Element current_;
    bool done_ = false;
  };
  RangeIterator begin() const { return RangeIterator(make_iterator()); }
  std::default_sentinel_t end() const { return {}; }

  explicit Dataset(std::shared_ptr<const data_internal::Node> node);
  const std::shared_ptr<const data_internal::Node>& node() const { return node_; }

 private:
  std::shared_ptr<const data_internal::Node> node_;
};

}  // namespace lockstep
