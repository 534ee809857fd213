#include "lockstep/keras/callbacks/backup_and_restore.h"

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
  if (it == meta.end()) {
    throw DataLoss("BackupAndRestore: '" + path + "' has no '" + key +
                   "' metadata; it is not a backup written by BackupAndRestore.");
  }
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

// Restores what random_state_metadata saved. Backups without it (written before it existed)
// restore no random state.
void restore_random_state(Model& model, const std::map<std::string, std::string>& meta,
                          const std::string& path) {
  auto it = meta.find("backup.random_generator");
  if (it == meta.end()) return;
  std::vector<uint64_t> g = split(it->second);
  if (g.size() != 4) {
    throw DataLoss("BackupAndRestore: '" + path + "': metadata 'backup.random_generator' is '" +
                   it->second + "', not 4 integers.");
  }
  std::vector<layers::Dropout*> dropouts;
  collect_dropouts(model, dropouts);
  const int replicas = model.distribute_strategy().num_replicas_in_sync();
  const int64_t saved_layers = parse_int(meta, "backup.dropout_layers", path);
  const int64_t saved_replicas = parse_int(meta, "backup.dropout_replicas", path);
  if (saved_layers != static_cast<int64_t>(dropouts.size()) || saved_replicas != replicas) {
    throw InvalidArgument("BackupAndRestore: '" + path + "' holds the random state of " +
                          std::to_string(saved_layers) + " Dropout layer(s) on " +
                          std::to_string(saved_replicas) + " replica(s); this model has " +
                          std::to_string(dropouts.size()) + " on " + std::to_string(replicas) +
                          ". Resume with the same model and number of replicas in sync.");
  }
  auto pos = meta.find("backup.dropout_positions");
  std::vector<uint64_t> p = pos == meta.end() ? std::vector<uint64_t>{} : split(pos->second);
  if (p.size() != dropouts.size() * static_cast<size_t>(replicas) * 2) {
    throw DataLoss("BackupAndRestore: '" + path +
                   "': metadata 'backup.dropout_positions' has the wrong number of values.");
  }
  set_random_generator_state({g[0], g[1], g[2], static_cast<uint32_t>(g[3])});
  size_t at = 0;
  for (layers::Dropout* d : dropouts) {
    std::vector<std::pair<uint64_t, uint32_t>> positions;
    for (int r = 0; r < replicas; ++r, at += 2)
      positions.emplace_back(p[at], static_cast<uint32_t>(p[at + 1]));
    d->set_generator_positions(positions);
  }
}

// "2 workers x 2 replicas (4 in sync)"; only the total for backups that did not record workers.
std::string replica_counts(int64_t workers, int64_t local, int64_t in_sync) {
  if (workers <= 0 || local <= 0)
    return "a job of " + std::to_string(in_sync) + " replicas in sync";
  return std::to_string(workers) + (workers == 1 ? " worker x " : " workers x ") +
         std::to_string(local) + (local == 1 ? " replica (" : " replicas (") +
         std::to_string(in_sync) + " in sync)";
}

// Weights and optimizer state are the same on every replica, and an input position counts steps
// of the same global (or per-replica, by replica id) batches, so a backup resumes exactly on any
// number of workers that present the same replicas in sync. With another number the per-replica
// pipelines would shard the data differently and the Dropout streams would not map onto the
// replicas: refuse at once, naming the counts and how to match them.
void check_replicas_in_sync(const std::map<std::string, std::string>& meta, const std::string& path,
                            distribute::Strategy& s) {
  const char* key = meta.contains("backup.replicas_in_sync") ? "backup.replicas_in_sync"
                                                             : "backup.dropout_replicas";
  if (!meta.contains(key)) return;  // written before replica counts were recorded
  const int64_t saved = parse_int(meta, key, path);
  if (saved == s.num_replicas_in_sync()) return;
  const bool has_layout =
      meta.contains("backup.num_workers") && meta.contains("backup.local_replicas");
  const int64_t saved_workers = has_layout ? parse_int(meta, "backup.num_workers", path) : 0;
  const int64_t saved_local = has_layout ? parse_int(meta, "backup.local_replicas", path) : 0;
  const int workers = s.num_workers();
  const std::string per_worker = std::to_string(saved / workers);
  const std::string how =
      saved % workers != 0
          ? "run a number of workers that divides " + std::to_string(saved) +
                ", each with LOCKSTEP_DEVICES=cpu:<" + std::to_string(saved) + " / workers>"
      : workers == 1 ? "set LOCKSTEP_DEVICES=cpu:" + per_worker +
                           " (LocalDeviceOptions::num_replicas = " + per_worker + ")"
                     : "set LOCKSTEP_DEVICES=cpu:" + per_worker + " on each of the " +
                           std::to_string(workers) + " workers";
  throw InvalidArgument("BackupAndRestore: '" + path + "' was written by " +
                        replica_counts(saved_workers, saved_local, saved) + "; this job has " +
                        replica_counts(workers, s.num_local_replicas(), s.num_replicas_in_sync()) +
                        ". A backup resumes on any number of workers with the same replicas in "
                        "sync: " +
                        how + ", or start afresh with another backup directory.");
}

}  // namespace

BackupAndRestore::BackupAndRestore(std::string backup_dir, bool delete_checkpoint)
    : dir_(std::move(backup_dir)), delete_checkpoint_(delete_checkpoint) {
  if (dir_.empty()) throw InvalidArgument("BackupAndRestore: backup_dir must not be empty.");
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
  const std::string path = backup_path();
  if (is_chief()) std::filesystem::create_directories(dir_);
  if (!std::filesystem::exists(path)) return;
  if (!target().resume_from || !target().iterator_state) {
    throw FailedPrecondition("BackupAndRestore: resuming needs fit (its input and epoch hooks).");
  }
  Model& m = model();
  if (!m.built()) {
    throw FailedPrecondition("BackupAndRestore: model '" + m.name() +
                             "' must be built (start it with keras::Input) before fit to restore "
                             "its weights from '" +
                             path + "'.");
  }
  // The optimizer creates its slots lazily on the first step; they must exist to be restored.
  optimizers::Optimizer& opt = target_optimizer();
  opt.build(m.trainable_weights());
  saving::SafetensorsFile file = saving::load_safetensors(path);  // DataLoss when corrupt
  check_replicas_in_sync(file.metadata, path, m.distribute_strategy());

  std::vector<std::pair<std::string, Variable>> expected;
  std::vector<Variable> weights = target_weights();
  for (size_t i = 0; i < weights.size(); ++i)
    expected.emplace_back(indexed("model", i, weights[i]), weights[i]);
  std::vector<Variable> opt_vars = opt.variables();
  for (size_t i = 0; i < opt_vars.size(); ++i)
    expected.emplace_back(indexed("optimizer", i, opt_vars[i]), opt_vars[i]);
  if (file.tensors.size() != expected.size()) {
    throw InvalidArgument("BackupAndRestore: '" + path + "' holds " +
                          std::to_string(file.tensors.size()) +
                          " tensors but the model and "
                          "optimizer have " +
                          std::to_string(expected.size()) +
                          " variables; it was written for a different model or optimizer.");
  }
  for (size_t i = 0; i < expected.size(); ++i) {
    const auto& [name, tensor] = file.tensors[i];
    const auto& [want, var] = expected[i];
    if (name != want || !(tensor.shape() == var.shape()) || tensor.dtype() != var.dtype()) {
      throw InvalidArgument("BackupAndRestore: '" + path + "' entry " + std::to_string(i) +
                            " is '" + name + "' " + tensor.describe() + "; expected '" + want +
                            "' " + var.raw_value().describe() +
                            ": it was written for a different model or optimizer.");
    }
  }
  const int64_t epoch = parse_int(file.metadata, "backup.epoch", path);
  IteratorState position{
      static_cast<uint64_t>(parse_int(file.metadata, "backup.iterator_iteration", path)),
      parse_int(file.metadata, "backup.iterator_position", path)};
  restore_random_state(m, file.metadata, path);
  for (size_t i = 0; i < expected.size(); ++i) expected[i].second.assign(file.tensors[i].second);
  restored_epoch_ = static_cast<int>(epoch);
  target().resume_from(restored_epoch_ + 1, position);
}

void BackupAndRestore::on_epoch_end(int epoch, const Logs&) {
  profiler::ScopedSpan write(profiler::Phase::kCheckpoint);
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
    saving::save_safetensors(backup_path(), tensors, metadata);
  }
  write.end();
  // No worker may run ahead into an epoch whose predecessor has no backup yet.
  profiler::ScopedSpan wait(profiler::Phase::kWait);
  barrier_workers();
}

void BackupAndRestore::on_train_end(const Logs&) {
  if (delete_checkpoint_ && is_chief()) std::filesystem::remove(backup_path());
}

}  // namespace lockstep::keras::callbacks
