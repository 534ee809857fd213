#include "lockstep/keras/callbacks/backup_and_restore.h"

#include <filesystem>
#include <utility>
#include <vector>

#include "lockstep/core/error.h"
#include "lockstep/distribute/replica_context.h"
#include "lockstep/distribute/strategy.h"
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
  for (size_t i = 0; i < expected.size(); ++i) expected[i].second.assign(file.tensors[i].second);
  restored_epoch_ = static_cast<int>(epoch);
  target().resume_from(restored_epoch_ + 1, position);
}

void BackupAndRestore::on_epoch_end(int epoch, const Logs&) {
  if (is_chief()) {
    std::vector<std::pair<std::string, Tensor>> tensors;
    add(tensors, "model", target_weights());
    add(tensors, "optimizer", target_optimizer().variables());
    IteratorState position = target().iterator_state ? target().iterator_state() : IteratorState{};
    saving::save_safetensors(backup_path(), tensors,
                             {{"backup.format", "1"},
                              {"backup.epoch", std::to_string(epoch)},
                              {"backup.iterator_iteration", std::to_string(position.iteration)},
                              {"backup.iterator_position", std::to_string(position.position)}});
  }
  // No worker may run ahead into an epoch whose predecessor has no backup yet.
  barrier_workers();
}

void BackupAndRestore::on_train_end(const Logs&) {
  if (delete_checkpoint_ && is_chief()) std::filesystem::remove(backup_path());
}

}  // namespace lockstep::keras::callbacks
