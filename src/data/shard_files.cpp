// Dataset::input_files and Dataset::shard_files (tf.data's AutoShardPolicy::FILE rewrite), and
// repeats_forever: walks over a pipeline's stages.
#include "internal.h"
#include "lockstep/core/check.h"
#include "lockstep/data/cardinality.h"

namespace lockstep {
namespace data_internal {

std::shared_ptr<const Node> Node::with_inputs(std::vector<std::shared_ptr<const Node>> in) const {
  LOCKSTEP_CHECK_AS(Internal, in.empty(), "Node::with_inputs: the stage ", to_string(),
                    " was given inputs but does not declare any.");
  return shared_from_this();
}

std::vector<std::string> shard_list(const std::vector<std::string>& files, int64_t n, int64_t index,
                                    const std::string& stage) {
  LOCKSTEP_CHECK(n > 0 && index >= 0 && index < n,
                 "Dataset::shard_files: expected 0 <= index < num_shards. Received num_shards=", n,
                 ", index=", index, ".");
  LOCKSTEP_CHECK(static_cast<int64_t>(files.size()) >= n, "Dataset::shard_files: the ", stage,
                 " stage reads ", files.size(), " file(s), fewer than the ", n,
                 " shards (workers): some would read nothing. Use more files, or shard by data "
                 "(AutoShardPolicy::DATA).");
  std::vector<std::string> out;
  for (size_t j = static_cast<size_t>(index); j < files.size(); j += static_cast<size_t>(n)) {
    out.push_back(files[j]);
  }
  return out;
}

namespace {

void collect(const std::shared_ptr<const Node>& node, std::vector<std::string>& out) {
  std::vector<std::string> f = node->files();
  out.insert(out.end(), f.begin(), f.end());
  for (const auto& in : node->inputs()) collect(in, out);
}

std::shared_ptr<const Node> rewrite(const std::shared_ptr<const Node>& node, int64_t n,
                                    int64_t index, int& sharded) {
  if (auto s = node->shard_files(n, index)) {
    ++sharded;
    return s;
  }
  std::vector<std::shared_ptr<const Node>> in = node->inputs();
  bool changed = false;
  for (auto& i : in) {
    auto r = rewrite(i, n, index, sharded);
    changed |= r != i;
    i = std::move(r);
  }
  return changed ? node->with_inputs(std::move(in)) : node;
}

bool endless(const std::shared_ptr<const Node>& node) {
  if (node->repeats_forever()) return true;
  for (const auto& in : node->inputs()) {
    if (endless(in)) return true;
  }
  return false;
}

}  // namespace
}  // namespace data_internal

bool repeats_forever(const Dataset& dataset) {
  return data_internal::endless(dataset.node());
}

std::vector<std::string> Dataset::input_files() const {
  std::vector<std::string> out;
  data_internal::collect(node_, out);
  return out;
}

Dataset Dataset::shard_files(int64_t num_shards, int64_t index) const {
  int sharded = 0;
  auto node = data_internal::rewrite(node_, num_shards, index, sharded);
  LOCKSTEP_CHECK(sharded > 0, "Dataset::shard_files: the pipeline ", to_string(),
                 " reads no files (no list_files stage or file source): shard it by data "
                 "(Dataset::shard, AutoShardPolicy::DATA) instead.");
  return Dataset(std::move(node));
}

}  // namespace lockstep
