#include "lockstep/keras/callbacks/backup_and_restore.h"
#include "lockstep/core/check.h"

#include <algorithm>
#include <filesystem>
#include <sstream>
#include <utility>
#include <vector>

#include "lockstep/core/error.h"
#include "lockstep/core/profiler.h"
#include "lockstep/distribute/replica_context.h"
#include "lockstep/distribute/strategy.h"
#include "lockstep/keras/initializers.h"
#include "lockstep/keras/layers/core.h"
#include "lockstep/keras/model.h"
#include "lockstep/keras/optimizers/optimizer.h"
#include "lockstep/keras/saving/safetensors.h"

namespace lockstep::keras::callbacks {

namespace {

std::string indexed(const char* prefix, size_t i, const Variable& v) {
  std::string n = std::to_string(i);
  return std::string(prefix) + "/" + std::string(n.size() < 3 ? 3 - n.size() : 0, '0') + n + "/" +
         v.name();
}

void add(std::vector<std::pair<std::string, Tensor>>& out, const char* prefix,
         const std::vector<Variable>& vars) {
  for (size_t i = 0; i < vars.size(); ++i)
    out.emplace_back(indexed(prefix, i, vars[i]), vars[i].raw_value());
}

int64_t parse_int(const std::map<std::string, std::string>& meta, const std::string& key,
                  const std::string& path) {
  auto it = meta.find(key);
  LOCKSTEP_CHECK_AS(DataLoss, it != meta.end(), "BackupAndRestore: '", path, "' has no '", key,
                    "' metadata; it is not a backup written by BackupAndRestore.");
  try {
    size_t used = 0;
    long long v = std::stoll(it->second, &used);
    if (used == it->second.size()) return v;
  } catch (const std::exception&) {
  }
  throw DataLoss("BackupAndRestore: '" + path + "': metadata '" + key + "' is '" + it->second +
                 "', not an integer.");
}

// Every Dropout layer of `model` (nested models included), in layer order.
void collect_dropouts(const Model& model, std::vector<layers::Dropout*>& out) {
  for (const auto& layer : model.layers()) {
    if (auto* d = dynamic_cast<layers::Dropout*>(layer.get())) out.push_back(d);
    if (auto* m = dynamic_cast<const Model*>(layer.get())) collect_dropouts(*m, out);
  }
}

std::string join(const std::vector<uint64_t>& values) {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) out += (i ? " " : "") + std::to_string(values[i]);
  return out;
}

std::vector<uint64_t> split(const std::string& text) {
  std::istringstream in(text);
  std::vector<uint64_t> out;
  for (uint64_t v; in >> v;) out.push_back(v);
  return out;
}

// The random state at an epoch end, as backup metadata: the global generator (the same on every
// worker: every worker runs the same program) and, per Dropout layer, the {counter, buffered}
// position of each replica's mask stream. Each worker only has its own replicas' streams, so
// their positions are SUM-all-reduced across workers (each contributes zeros for the others);
// counters travel as doubles, exact below 2^53 Philox blocks. A collective: every worker calls it.
std::map<std::string, std::string> random_state_metadata(Model& model) {
  distribute::Strategy& s = model.distribute_strategy();
  std::vector<layers::Dropout*> dropouts;
  collect_dropouts(model, dropouts);
  const int replicas = s.num_replicas_in_sync();
  std::vector<double> positions;
  for (layers::Dropout* d : dropouts) {
    for (const auto& [counter, buffered] : d->generator_positions(replicas)) {
      positions.push_back(static_cast<double>(counter));
      positions.push_back(static_cast<double>(buffered));
    }
  }
  s.all_reduce_across_workers(positions, distribute::ReduceOp::SUM);
  std::vector<uint64_t> exact(positions.begin(), positions.end());
  Generator::State g = random_generator_state();
  return {{"backup.random_generator", join({g.seed, g.stream, g.counter, g.buffered})},
          {"backup.dropout_layers", std::to_string(dropouts.size())},
          {"backup.dropout_replicas", std::to_string(replicas)},
          {"backup.dropout_positions", join(exact)}};
}

// Where each of `replicas` replicas continues a Dropout layer's mask streams after an elastic
// restart. On the replica count the backup was written with, every stream continues where it was.
// On another count the streams cannot map onto the replicas (a replica's mask covers its own slice
// of the global batch, whose size and rows changed), so they are derived from the backup alone:
// replica r takes stream (layer seed, r) from the furthest block any saved replica had reached.
// Every block before it may have been drawn already, none from it on, so no mask drawn after the
// restart repeats one drawn before it, and the same backup on the same count gives the same masks.
std::vector<std::pair<uint64_t, uint32_t>> resumed_positions(
    const std::vector<std::pair<uint64_t, uint32_t>>& saved, int replicas) {
  if (static_cast<int>(saved.size()) == replicas) return saved;
  uint64_t furthest = 0;
  for (const auto& [counter, buffered] : saved) furthest = std::max(furthest, counter);
  return std::vector<std::pair<uint64_t, uint32_t>>(static_cast<size_t>(replicas), {furthest, 0});
}

// Restores what random_state_metadata saved. Backups without it (written before it existed)
// restore no random state.
void restore_random_state(Model& model, const std::map<std::string, std::string>& meta,
                          const std::string& path) {
  auto it = meta.find("backup.random_generator");
  if (it == meta.end()) return;
  std::vector<uint64_t> g = split(it->second);
  LOCKSTEP_CHECK_AS(DataLoss, g.size() == 4, "BackupAndRestore: '", path,
                    "': metadata 'backup.random_generator' is '", it->second, "', not 4 integers.");
  std::vector<layers::Dropout*> dropouts;
  collect_dropouts(model, dropouts);
  const int replicas = model.distribute_strategy().num_replicas_in_sync();
  const int64_t saved_layers = parse_int(meta, "backup.dropout_layers", path);
  const int64_t saved_replicas = parse_int(meta, "backup.dropout_replicas", path);
  LOCKSTEP_CHECK(saved_layers == static_cast<int64_t>(dropouts.size()), "BackupAndRestore: '", path,
                 "' holds the random state of ", saved_layers, " Dropout layer(s); this model has ",
                 dropouts.size(),
                 ": it was written for a different model. Resume with the same model.");
  auto pos = meta.find("backup.dropout_positions");
  std::vector<uint64_t> p = pos == meta.end() ? std::vector<uint64_t>{} : split(pos->second);
  LOCKSTEP_CHECK_AS(
      DataLoss,
      saved_replicas > 0 && p.size() == dropouts.size() * static_cast<size_t>(saved_replicas) * 2,
      "BackupAndRestore: '", path,
      "': metadata 'backup.dropout_positions' has the wrong number of values.");
  set_random_generator_state({g[0], g[1], g[2], static_cast<uint32_t>(g[3])});
  size_t at = 0;
  for (layers::Dropout* d : dropouts) {
    std::vector<std::pair<uint64_t, uint32_t>> saved;
    for (int64_t r = 0; r < saved_replicas; ++r, at += 2)
      saved.emplace_back(p[at], static_cast<uint32_t>(p[at + 1]));
    d->set_generator_positions(resumed_positions(saved, replicas));
  }
}

// The replicas in sync a backup was written with, or -1 when it did not record them.
int64_t saved_replicas_in_sync(const std::map<std::string, std::string>& meta,
                               const std::string& path) {
  for (const char* key : {"backup.replicas_in_sync", "backup.dropout_replicas"}) {
    if (meta.contains(key)) return parse_int(meta, key, path);
  }
  return -1;
}

// "2 workers x 2 replicas (4 in sync)"; only the total when the workers are not known.
std::string replica_counts(int64_t workers, int64_t local, int64_t in_sync) {
  if (workers <= 0 || local <= 0) return std::to_string(in_sync) + " replicas in sync";
  return std::to_string(workers) + (workers == 1 ? " worker x " : " workers x ") +
         std::to_string(local) + (local == 1 ? " replica (" : " replicas (") +
         std::to_string(in_sync) + " in sync)";
}

int64_t parse_optional(const std::map<std::string, std::string>& meta, const std::string& key,
                       const std::string& path) {
  return meta.contains(key) ? parse_int(meta, key, path) : -1;
}

}  // namespace

BackupAndRestore::BackupAndRestore(std::string backup_dir, bool delete_checkpoint)
    : dir_(std::move(backup_dir)), delete_checkpoint_(delete_checkpoint) {
  LOCKSTEP_CHECK(!dir_.empty(), "BackupAndRestore: backup_dir must not be empty.");
}

std::string BackupAndRestore::backup_path() const {
  return (std::filesystem::path(dir_) / "backup.safetensors").string();
}

bool BackupAndRestore::is_chief() {
  return model().distribute_strategy().worker_index() == 0;
}

void BackupAndRestore::barrier_workers() {
  distribute::Strategy& s = model().distribute_strategy();
  if (s.num_workers() <= 1) return;
  s.run_on_replicas([](distribute::ReplicaContext& ctx) {
    if (ctx.local_replica_id() != 0) return;
    if (distribute::Communicator* cross = ctx.cross_worker_communicator()) cross->barrier();
  });
}

void BackupAndRestore::on_train_begin(const Logs&) {
  restored_epoch_ = -1;
  restored_replicas_in_sync_ = -1;
  saved_global_batch_ = 0;
  global_batch_pending_ = false;
  smaller_global_batch_ = false;
  largest_global_batch_ = 0;
  const std::string path = backup_path();
  if (is_chief()) std::filesystem::create_directories(dir_);
  if (!std::filesystem::exists(path)) return;
  LOCKSTEP_CHECK_AS(FailedPrecondition, target().resume_from && target().iterator_state,
                    "BackupAndRestore: resuming needs fit (its input and epoch hooks).");
  Model& m = model();
  LOCKSTEP_CHECK_AS(FailedPrecondition, m.built(), "BackupAndRestore: model '", m.name(),
                    "' must be built (start it with keras::Input) before fit to restore its "
                    "weights from '",
                    path, "'.");
  // The optimizer creates its slots lazily on the first step; they must exist to be restored.
  optimizers::Optimizer& opt = target_optimizer();
  opt.build(m.trainable_weights());
  saving::SafetensorsFile file = saving::load_safetensors(path);  // DataLoss when corrupt

  std::vector<std::pair<std::string, Variable>> expected;
  std::vector<Variable> weights = target_weights();
  for (size_t i = 0; i < weights.size(); ++i)
    expected.emplace_back(indexed("model", i, weights[i]), weights[i]);
  std::vector<Variable> opt_vars = opt.variables();
  for (size_t i = 0; i < opt_vars.size(); ++i)
    expected.emplace_back(indexed("optimizer", i, opt_vars[i]), opt_vars[i]);
  LOCKSTEP_CHECK(file.tensors.size() == expected.size(), "BackupAndRestore: '", path, "' holds ",
                 file.tensors.size(), " tensors but the model and optimizer have ", expected.size(),
                 " variables; it was written for a different model or optimizer.");
  for (size_t i = 0; i < expected.size(); ++i) {
    const auto& [name, tensor] = file.tensors[i];
    const auto& [want, var] = expected[i];
    LOCKSTEP_CHECK(name == want && tensor.shape() == var.shape() && tensor.dtype() == var.dtype(),
                   "BackupAndRestore: '", path, "' entry ", i, " is '", name, "' ",
                   tensor.describe(), "; expected '", want, "' ", var.raw_value().describe(),
                   ": it was written for a different model or optimizer.");
  }
  const int64_t epoch = parse_int(file.metadata, "backup.epoch", path);
  IteratorState position{
      static_cast<uint64_t>(parse_int(file.metadata, "backup.iterator_iteration", path)),
      parse_int(file.metadata, "backup.iterator_position", path)};
  const int64_t saved_in_sync = saved_replicas_in_sync(file.metadata, path);
  saved_layout_ =
      replica_counts(parse_optional(file.metadata, "backup.num_workers", path),
                     parse_optional(file.metadata, "backup.local_replicas", path), saved_in_sync);
  check_same_workers_if_by_file(file.metadata, path);
  saved_global_batch_ =
      std::max<int64_t>(0, parse_optional(file.metadata, "backup.global_batch_size", path));
  restore_random_state(m, file.metadata, path);
  for (size_t i = 0; i < expected.size(); ++i) expected[i].second.assign(file.tensors[i].second);
  restored_epoch_ = static_cast<int>(epoch);
  restored_replicas_in_sync_ = static_cast<int>(saved_in_sync);
  global_batch_pending_ = saved_global_batch_ > 0 && static_cast<bool>(target().global_batch_size);
  target().resume_from(restored_epoch_ + 1, position);
}

// A FILE-sharded input gives each worker its own files: a worker's input position is in its own
// files, and another number of workers splits the files differently. Such a backup resumes on its
// own number of workers only; there is no re-sharding.
void BackupAndRestore::check_same_workers_if_by_file(
    const std::map<std::string, std::string>& metadata, const std::string& path) const {
  const auto saved = metadata.find("backup.input_sharding");
  const bool saved_by_file = saved != metadata.end() && saved->second == "file";
  const bool now_by_file = target().input_sharded_by_file && target().input_sharded_by_file();
  const int64_t saved_workers = parse_optional(metadata, "backup.num_workers", path);
  const distribute::Strategy& s = model().distribute_strategy();
  if (!(saved_by_file || now_by_file) || saved_workers <= 0 || saved_workers == s.num_workers()) {
    return;
  }
  throw FailedPrecondition(
      "BackupAndRestore: '" + path + "' was written by " + saved_layout_ + " reading " +
      (saved_by_file ? "files sharded across workers (AutoShardPolicy::FILE)"
                     : "data sharded across workers") +
      "; this job (" +
      replica_counts(s.num_workers(), s.num_local_replicas(), s.num_replicas_in_sync()) +
      ") reads " +
      (now_by_file ? "files sharded across its workers" : "data sharded across its workers") +
      ". With files sharded by worker, each worker's input position is in its own files, which " +
      "another number of workers splits differently: resume on " + std::to_string(saved_workers) +
      (saved_workers == 1 ? " worker" : " workers") +
      ", or shard by data in both runs (AutoShardPolicy::DATA; lockstep train: "
      "--auto-shard-policy data).");
}

void BackupAndRestore::on_train_batch_end(int64_t, const Logs&) {
  if (!target().global_batch_size) return;
  const int64_t batch = target().global_batch_size();
  largest_global_batch_ = std::max(largest_global_batch_, batch);
  if (!global_batch_pending_) return;
  // The first step after resuming must take the backup's global batch. A smaller one may be the
  // input's last, partial batch; it is refused as soon as another step shows that it was not.
  if (batch == saved_global_batch_ && !smaller_global_batch_) {
    global_batch_pending_ = false;
    return;
  }
  if (batch < saved_global_batch_ && !smaller_global_batch_) {
    smaller_global_batch_ = true;
    first_resumed_global_batch_ = batch;
    return;
  }
  const int64_t got = smaller_global_batch_ ? first_resumed_global_batch_ : batch;
  const distribute::Strategy& s = model().distribute_strategy();
  throw InvalidArgument(
      "BackupAndRestore: '" + backup_path() + "' was written by " + saved_layout_ +
      " training on a global batch of " + std::to_string(saved_global_batch_) +
      " examples per step; this job (" +
      replica_counts(s.num_workers(), s.num_local_replicas(), s.num_replicas_in_sync()) +
      ") resumed it on global batches of " + std::to_string(got) +
      ". A restart on another number of replicas keeps the global batch (each replica takes a "
      "larger or smaller share of it): build the input with a global batch of " +
      std::to_string(saved_global_batch_) + " (lockstep train: --global-batch-size " +
      std::to_string(saved_global_batch_) + ").");
}

void BackupAndRestore::on_epoch_end(int epoch, const Logs&) {
  profiler::ScopedSpan write(profiler::Phase::checkpoint);
  // Every worker takes part: the Dropout streams are gathered with a collective.
  std::map<std::string, std::string> metadata = random_state_metadata(model());
  if (is_chief()) {
    std::vector<std::pair<std::string, Tensor>> tensors;
    add(tensors, "model", target_weights());
    add(tensors, "optimizer", target_optimizer().variables());
    IteratorState position = target().iterator_state ? target().iterator_state() : IteratorState{};
    const distribute::Strategy& s = model().distribute_strategy();
    metadata.insert({{"backup.format", "1"},
                     {"backup.epoch", std::to_string(epoch)},
                     {"backup.num_workers", std::to_string(s.num_workers())},
                     {"backup.local_replicas", std::to_string(s.num_local_replicas())},
                     {"backup.replicas_in_sync", std::to_string(s.num_replicas_in_sync())},
                     {"backup.iterator_iteration", std::to_string(position.iteration)},
                     {"backup.iterator_position", std::to_string(position.position)}});
    if (target().input_sharded_by_file) {
      metadata.insert(
          {"backup.input_sharding", target().input_sharded_by_file() ? "file" : "data"});
    }
    if (largest_global_batch_ > 0) {
      metadata.insert({"backup.global_batch_size", std::to_string(largest_global_batch_)});
    }
    saving::save_safetensors(backup_path(), tensors, metadata);
  }
  write.end();
  // No worker may run ahead into an epoch whose predecessor has no backup yet.
  profiler::ScopedSpan wait(profiler::Phase::wait);
  barrier_workers();
}

void BackupAndRestore::on_train_end(const Logs&) {
  if (delete_checkpoint_ && is_chief()) std::filesystem::remove(backup_path());
}

}  // namespace lockstep::keras::callbacks
