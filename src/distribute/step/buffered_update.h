#pragma once
// BufferedUpdate: the optimizer's elementwise rule (ElementwiseUpdate) applied to the step's
// variables out of place, chunk by chunk, as tasks any thread may run and run again.
//
// Each variable and each of its optimizer slots has a second, *next* buffer
// (Variable::enable_next_buffer). A chunk reads the current values and the summed gradient and
// writes the new values: a task's first run straight to the next buffers, a backup run to its
// thread's scratch. A chunk run twice computes the same bits and only the run that commits
// writes: when a backup wins, its result goes to the variable's *spare* buffers (the first run
// may still be writing the next ones), and at the end of the update the spares, completed with
// the chunks the first runs wrote, become the next buffers (the rule's rounded copy of the weights
// likewise, through ElementwiseUpdate::swap_rounded_output, when the rule has one and can swap
// it). Then every variable flips to its next buffer. Models whose update writes more than the
// caches hold have first runs write the weights and slots with non-temporal stores (Streamed;
// set_streaming_threshold), and with several threads on an AMD CPU the float32 values the
// replicas multiply by are streamed too, since every core read their lines
// (set_stream_shared_reads); the bits are the same either way.
//
// An update may instead run in place (begin_update's `in_place`): each chunk's one run reads and
// writes the current buffers and nothing flips. That keeps one copy of the weights and slots in
// the caches instead of two, but no chunk can be backed up (a second run would read what the first
// wrote), so the step asks for it only where a straggler is unlikely and nothing else reads the
// weights during the update (ReplicatedStep, set_in_place).
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "chunk_layout.h"
#include "gradient_reducer.h"
#include "lockstep/autodiff/variable.h"
#include "lockstep/distribute/elementwise_update.h"

namespace lockstep::distribute {

class TaskPhase;

class BufferedUpdate {
 public:
  // `rule` is bound to `vars` here and must outlive the update; `threads`: the pool's
  // total_threads() (one scratch each).
  BufferedUpdate(const ChunkLayout& layout, std::vector<Variable> vars, ElementwiseUpdate& rule,
                 int threads);
  ~BufferedUpdate();
  BufferedUpdate(const BufferedUpdate&) = delete;
  BufferedUpdate& operator=(const BufferedUpdate&) = delete;

  ElementwiseUpdate& rule() const { return rule_; }

  // Once per update, before its phase runs: the buffers it reads and writes (the current ones
  // in place: no backups of its chunks, no flip), then the rule's begin_update (with the summed
  // gradient's squared norms when the rule wants them).
  void begin_update(std::span<const double> squared_norms = {}, bool in_place = false);
  bool in_place() const { return in_place_; }
  // The update's phase summing each chunk's `terms` as it goes (two terms: added as the rule
  // reads them; one replica's gradient: read where it is).
  TaskPhase& phase_summing(const GradientReducer::Terms& terms);
  // The update's phase reading the summed gradient from `sum` (flat, ChunkLayout), which it
  // leaves as it is.
  TaskPhase& phase_from_sum(float* sum);
  // After the phase: the chunks backups won published, every buffer flipped, the rule's
  // end_update.
  void end_update();

  // Updates a backup run won a chunk of, since construction.
  uint64_t backup_publishes() const { return backup_publishes_; }
  // Chunk runs that read a replica's bfloat16 gradient, since construction.
  uint64_t bfloat16_gradient_chunks() const { return bf16_chunks_.load(std::memory_order_relaxed); }

  // What a task of the last phase asked for does, for a given task, thread and kind of run:
  // run_chunk computes it (a backup run into scratch), commit_chunk writes the winner's result.
  void* run_chunk(int task, int thread, bool backup);
  void commit_chunk(int task, void* result);

  // Updates constructed afterwards write with non-temporal stores when they write more than
  // `bytes` per step (default 16 MiB: more than the cores' caches hold, so the stores would
  // only evict).
  static void set_streaming_threshold(size_t bytes);
  static size_t streaming_threshold();
  // Whether updates constructed afterwards on several threads stream the float32 values the
  // replicas multiply by (every core's forward pass read their lines) rather than store them
  // in cache. Default: on AMD CPUs, not elsewhere — whether an ordinary store that first takes the
  // lines back from the other cores beats writing around the caches and reading from memory next
  // step depends on the cache design (docs/performance.md, "Measured design choices").
  static void set_stream_shared_reads(bool on);
  static bool stream_shared_reads();

  // When the training step updates in place: never; when_quiet (the default), on a machine with a
  // spare core for every thread of the step (TaskPool::spin_before_sleep), where a chunk's run is
  // rarely descheduled and a backup would seldom win, or with one thread, where none can run;
  // always, whatever the load. In every mode only after a replicas' phase none of whose tasks
  // was backed up (TaskPool::last_phase_backed_up): a losing replica run may still be reading the
  // weights. Process-wide; for tests and measurements.
  enum class InPlace { never, when_quiet, always };
  static void set_in_place(InPlace mode);
  static InPlace in_place_mode();

 private:
  struct Scratch;
  class Phase;
  void run_part(const Chunk& c, size_t base, Scratch& sc, bool backup);
  // The rounding of variable i's weights that first runs write straight to its next buffer, and
  // so a winning backup to its spare (direct_rounded_): the bfloat16 copy, else the float32 values
  // when they are not streamed; null when there is none.
  struct DirectRounded {
    void* data = nullptr;
    DType dtype = DType::float32;
    const PairedRowsLayout* layout = nullptr;
  };
  DirectRounded direct_rounded(size_t i) const;
  void allocate_spares(size_t var);
  void publish_backup_updates();

  const ChunkLayout& layout_;
  std::vector<Variable> vars_;
  std::vector<std::vector<Variable>> slots_;
  ElementwiseUpdate& rule_;
  size_t max_slots_ = 0;
  bool streaming_ = false;
  // The rule can swap a spare in for its rounded output (swaps_rounded_output): a first run then
  // writes the rounding straight to it.
  bool direct_rounded_ = false;
  // Several threads run the replicas and stream_shared_reads(), so the float32 values they
  // multiply by next step (the weights, or the rule's rounding of them held in float32) are written
  // with non-temporal stores (copy_next; x86 only, where there are such stores). A bfloat16 copy
  // is not.
  bool shared_reads_ = false;
  bool in_place_ = false;  // this update's, from begin_update
  // What the current phase reads: terms to sum, or a flat sum.
  GradientReducer::Terms terms_;
  float* sum_ = nullptr;
  std::unique_ptr<Phase> phase_;
  // Per variable, set by begin_update: the current and next data of the variable and its
  // slots, and where its next bfloat16 rounding goes (both pointers null: not in use).
  std::vector<const float*> cur_w_;
  std::vector<float*> next_w_;
  std::vector<RoundedOut> next_r_;
  std::vector<std::vector<const float*>> cur_s_;
  std::vector<std::vector<float*>> next_s_;
  std::vector<std::unique_ptr<Scratch>> scratch_;  // per pool thread
  // Chunks a backup won this update (written by commit, read after the phase), and per variable
  // the spare weights and slots such a run's result goes to.
  std::vector<char> won_by_backup_;
  std::vector<Tensor> spare_w_;
  std::vector<std::vector<Tensor>> spare_s_;
  std::vector<Tensor> spare_r_;  // the rounded output's, where a first run writes it directly
  std::mutex spare_mu_;
  uint64_t backup_publishes_ = 0;
  std::atomic<uint64_t> bf16_chunks_{0};
};

}  // namespace lockstep::distribute
