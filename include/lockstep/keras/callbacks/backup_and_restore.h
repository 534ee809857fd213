#pragma once
// BackupAndRestore (keras.callbacks.BackupAndRestore): survives an interrupted fit. At the end of
// every epoch it writes `<backup_dir>/backup.safetensors` holding
//
//   model/<i>/<name>       every model weight (model.weights order)
//   optimizer/<i>/<name>   every optimizer variable: iterations, the learning rate when constant,
//                          the slots (Optimizer::variables order)
//   __metadata__           "backup.format": "1", "backup.epoch": the last completed epoch
//                          (0-based), "backup.iterator_iteration" / "backup.iterator_position":
//                          the position of fit's input iterator (IteratorState),
//                          "backup.random_generator": the global generator's state
//                          (initializers.h), "backup.dropout_*": each Dropout layer's per-replica
//                          mask stream positions (all workers' replicas), "backup.num_workers" /
//                          "backup.local_replicas" / "backup.replicas_in_sync": the job's layout
//
// When fit starts and the file exists, everything is restored and fit continues at the epoch
// after the saved one, with the input iterator where it was, so the resumed run computes exactly
// what the uninterrupted one would have (same bits, for a deterministic pipeline and strategy).
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
// Dropout). Restoring needs the same model and number of replicas in sync, on any number of
// workers (2 workers x 1 replica resume as 1 worker x 2 replicas: the input position counts steps
// of the same global batches, or of per-replica pipelines identified by global replica id);
// another number of replicas in sync throws InvalidArgument naming the layout the backup was
// written with, before anything is restored. The model must be built (keras::Input) before fit
// so that its weights exist to restore into.
#include <string>

#include "lockstep/keras/callbacks/callback.h"

namespace lockstep::keras::callbacks {

class BackupAndRestore final : public Callback {
 public:
  explicit BackupAndRestore(std::string backup_dir, bool delete_checkpoint = true);

  void on_train_begin(const Logs& logs) override;
  void on_epoch_end(int epoch, const Logs& logs) override;
  void on_train_end(const Logs& logs) override;

  // `<backup_dir>/backup.safetensors`.
  std::string backup_path() const;
  // The epoch fit resumed after (0-based), or -1 when it started afresh.
  int restored_epoch() const { return restored_epoch_; }

 private:
  void barrier_workers();
  bool is_chief();
  std::string dir_;
  bool delete_checkpoint_;
  int restored_epoch_ = -1;
};

}  // namespace lockstep::keras::callbacks
