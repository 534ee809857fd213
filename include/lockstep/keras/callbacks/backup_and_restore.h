#pragma once
// BackupAndRestore (keras.callbacks.BackupAndRestore): survives an interrupted fit. At the end of
// every epoch it writes `<backup_dir>/backup.safetensors` holding
//
//   model/<i>/<name>       every model weight (model.weights order)
//   optimizer/<i>/<name>   every optimizer variable: iterations, the learning rate when constant,
//                          the slots (Optimizer::variables order)
//   __metadata__           "backup.format": "1", "backup.epoch": the last completed epoch
//                          (0-based), "backup.iterator_iteration" / "backup.iterator_position":
//                          the position of fit's input iterator (IteratorState, in steps),
//                          "backup.random_generator": the global generator's state
//                          (initializers.h), "backup.dropout_*": each Dropout layer's per-replica
//                          mask stream positions (all workers' replicas), "backup.num_workers" /
//                          "backup.local_replicas" / "backup.replicas_in_sync": the job's layout,
//                          "backup.global_batch_size": the largest global batch of its steps,
//                          "backup.input_sharding": "file" when each worker read its own files
//                          (AutoShardPolicy::FILE), else "data"
//
// When fit starts and the file exists, everything is restored and fit continues at the epoch
// after the saved one, with the input iterator where it was, so the resumed run computes exactly
// what the uninterrupted one would have (same bits, for a deterministic pipeline and strategy).
// A backup of a FILE-sharded input resumes on the same number of workers only (each worker's input
// position is in its own files); another number of workers is refused with FailedPrecondition
// before anything is restored.
// When training completes, the backup is deleted (as Keras does), so the next fit starts afresh.
//
// Crash safety: the file is written atomically (save_safetensors: temporary file, fsync, rename),
// so a kill at any point leaves the previous epoch's backup or the new one, never a partial file;
// leftover temporary files are never read. A backup file that is nevertheless corrupt (checksums)
// makes fit throw DataLoss naming it rather than silently starting over.
//
// Multi-worker: the chief (worker 0) writes and deletes; the other workers wait for it at a
// barrier, so no worker starts the next epoch before the backup of this one exists. Every worker
// reads the backup on start, so `backup_dir` must be on a file system all workers see.
//
// Random state: layers draw their seeds from keras::next_seed() when they are created, so a
// restarted program that calls set_random_seed and builds the same model gets the same seeds; the
// backup adds where the global generator and every Dropout replica's mask stream had got to, so
// the masks after the resume point are the uninterrupted run's too (bit-identical resumption with
// Dropout). The model must be built (keras::Input) before fit so that its weights exist to restore
// into, and be the same model with the same optimizer: otherwise fit throws InvalidArgument naming
// the first variable that differs, before anything is restored.
//
// Elastic restart: a backup resumes on any number of workers and replicas in sync (after losing a
// host, on the replicas that are left). Weights, optimizer slots and the step counter are the same
// on every replica and restore exactly. The input continues at the same step (the iterator's
// position counts steps; DistributedDataset re-shards it for the new layout), so the job must keep
// the global batch: each replica then takes global / replicas examples instead of global / saved
// replicas, and the gradient of every step is that of the same global batch. With a global
// pipeline (experimental_distribute_dataset) the resumed steps see the very global batches the
// uninterrupted run would have; per-replica pipelines shard the data by replica, so they continue
// at the same step of the order the new layout's pipelines define. The backup records the global
// batch of its steps ("backup.global_batch_size"); a resumed step of another global batch throws
// InvalidArgument (a smaller one only once a later step shows it was not the input's last, partial
// batch). A global batch that the new replicas cannot divide where the input needs it
// (InputContext::get_per_replica_batch_size) is refused there. Dropout's per-replica mask streams
// cannot carry over when the number of replicas in sync changes (each covers its replica's slice
// of the global batch): replica r of the new layout continues stream (layer seed, r) from the
// furthest block any saved replica had reached, so no mask repeats one drawn before the backup
// and a resume from the same backup on the same layout draws the same masks. On the same number
// of replicas in sync (e.g. 2 workers x 1 replica resumed as 1 worker x 2) every stream continues
// exactly and the resumed weights are bit-identical to an uninterrupted run's.
#include <cstdint>
#include <map>
#include <string>

#include "lockstep/keras/callbacks/callback.h"

namespace lockstep::keras::callbacks {

class BackupAndRestore final : public Callback {
 public:
  explicit BackupAndRestore(std::string backup_dir, bool delete_checkpoint = true);

  void on_train_begin(const Logs& logs) override;
  void on_train_batch_end(int64_t batch, const Logs& logs) override;
  bool uses_train_batch_logs() const override { return false; }
  void on_epoch_end(int epoch, const Logs& logs) override;
  void on_train_end(const Logs& logs) override;

  // `<backup_dir>/backup.safetensors`.
  std::string backup_path() const;
  // The epoch fit resumed after (0-based), or -1 when it started afresh.
  int restored_epoch() const { return restored_epoch_; }
  // The replicas in sync of the job that wrote the backup fit resumed from; -1 when it started
  // afresh (or the backup did not record them).
  int restored_replicas_in_sync() const { return restored_replicas_in_sync_; }

 private:
  void barrier_workers();
  void check_same_workers_if_by_file(const std::map<std::string, std::string>& metadata,
                                     const std::string& path) const;
  bool is_chief();
  std::string dir_;
  bool delete_checkpoint_;
  int restored_epoch_ = -1;
  int restored_replicas_in_sync_ = -1;
  std::string saved_layout_;           // "2 workers x 2 replicas (4 in sync)", for messages
  int64_t saved_global_batch_ = 0;     // 0: not recorded
  bool global_batch_pending_ = false;  // the first resumed step is yet to be checked
  bool smaller_global_batch_ = false;  // it was smaller than the backup's
  int64_t first_resumed_global_batch_ = 0;
  int64_t largest_global_batch_ = 0;  // of this fit's steps
};

}  // namespace lockstep::keras::callbacks
