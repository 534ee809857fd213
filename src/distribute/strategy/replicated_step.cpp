#include "lockstep/distribute/replicated_step.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "core/cpu_dispatch.h"
#include "lockstep/core/error.h"
#include "lockstep/core/profiler.h"
#include "lockstep/core/task_cancellation.h"
#include "lockstep/distribute/background_reducer.h"
#include "lockstep/distribute/strategy.h"
#include "lockstep/distribute/task_pool.h"
#include "lockstep/ops/elementwise.h"

namespace lockstep::distribute {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Phases stay referenced by the pool's record of them until it is reused, which the pool does
// only once nothing runs in it; this many later phases make sure of that.
constexpr uint64_t kPhaseRetention = 8;

// The update writes each chunk's new values out of place, into the variables' next buffers. For a
// model whose update state is larger than the caches, those writes would first read every line
// they replace (a write-allocate) although nothing reads it before the next step: non-temporal
// stores skip that read, a third of the update's memory traffic. Small models keep ordinary
// stores, which leave the values in cache for the next step.
void copy_next(float* dst, const float* src, size_t n, bool streaming) {
#if defined(__x86_64__) || defined(__i386__)
  if (streaming) {
    size_t i = 0;
    for (; i < n && (reinterpret_cast<uintptr_t>(dst + i) & 15) != 0; ++i) dst[i] = src[i];
    for (; i + 4 <= n; i += 4) _mm_stream_ps(dst + i, _mm_loadu_ps(src + i));
    for (; i < n; ++i) dst[i] = src[i];
    return;
  }
#endif
  (void)streaming;
  std::memcpy(dst, src, n * sizeof(float));
}

std::atomic<size_t> g_streaming_threshold{size_t{16} << 20};

// Elements a backup run of a chunk computes between two cancellation checks: ~2 µs of an Adam
// update on one core.
constexpr int64_t kBackupSlice = 2048;

}  // namespace

// ---- ReplicaRun

void ReplicaRun::reset(int replica, bool overlap) {
  replica_ = replica;
  overlap_ = overlap;
  std::fill(bucket_ready_.begin(), bucket_ready_.end(), 0);
  std::fill(defined_.begin(), defined_.end(), 0);
  locals_.clear();
  commits_.clear();
  deferred_.clear();
}

void ReplicaRun::set_gradients(const std::vector<Tensor>& grads) {
  if (grads.size() != views_.size()) {
    throw InvalidArgument("ReplicaRun::set_gradients: expected one gradient per variable (" +
                          std::to_string(views_.size()) + "). Received " +
                          std::to_string(grads.size()) + ".");
  }
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor& g = grads[i];
    if (!g.defined()) {
      defined_[i] = 0;
      continue;
    }
    if (g.dtype() != DType::float32 || !(g.shape() == views_[i].shape())) {
      throw InvalidArgument("ReplicaRun::set_gradients: gradient " + std::to_string(i) +
                            " must be float32 shaped like its variable: expected " +
                            views_[i].describe() + ". Received: " + g.describe() + ".");
    }
    if (g.raw_data() != views_[i].raw_data()) views_[i].copy_from(g);
    defined_[i] = 1;
  }
}

void ReplicaRun::gradient_ready(size_t variable, const Tensor& gradient) {
  if (!overlap_) return;
  if (gradient.defined() && gradient.raw_data() != views_[variable].raw_data()) {
    views_[variable].copy_from(gradient);
  }
  defined_[variable] = gradient.defined() ? 1 : 0;
  const size_t b = step_->bucket_of_[variable];
  const ReplicatedStep::Bucket& bucket = step_->buckets_[b];
  if (++bucket_ready_[b] == static_cast<int>(bucket.end_var - bucket.first_var))
    step_->bucket_ready(*this, b);
}

void ReplicaRun::commit() {
  for (Local& l : locals_) l.commit();
  for (auto& fn : commits_) fn();
  locals_.clear();
  commits_.clear();
}

void* ReplicaRun::find_local(const void* shared) const {
  for (const Local& l : locals_)
    if (l.shared == shared) return l.copy.get();
  return nullptr;
}

void ReplicaRun::add_local(const void* shared, std::shared_ptr<void> copy,
                           std::function<void()> commit) {
  locals_.push_back({shared, std::move(copy), std::move(commit)});
}

// ---- the step's pieces

struct ReplicatedStep::Slot {
  ReplicaRun run;
};

struct ReplicatedStep::Scratch {
  std::vector<float> g, w, rounded;
  std::vector<std::vector<float>> slots;
  std::vector<float*> slot_ptrs;
  std::vector<const float*> slot_in;
  const Chunk* chunk = nullptr;
  bool has_rounded = false;
  bool direct = false;  // this run wrote the weights and slots straight to the next buffers
};

class ReplicatedStep::ReplicaPhase : public TaskPhase {
 public:
  ReplicaPhase(ReplicatedStep& step, ReplicaFn fn, bool overlap, bool then_update)
      : step_(step), fn_(std::move(fn)), overlap_(overlap), then_update_(then_update) {}
  int num_tasks() const override { return step_.num_local_; }
  int kind() const override { return 0; }
  profiler::Phase trace_phase() const override { return profiler::Phase::replica; }
  int trace_replica(int task) const override { return task; }
  void* run(int replica, int /*thread*/) override {
    Slot* slot = step_.acquire();
    try {
      check_task_cancelled();
      slot->run.reset(replica, overlap_);
      ReplicaContext ctx(step_.strategy_, replica, nullptr, step_.strategy_.cross_worker(),
                         &slot->run);
      ReplicaContextScope context(&ctx);
      Strategy::Scope scope(step_.strategy_);
      fn_(ctx, slot->run);
    } catch (...) {
      step_.release(slot);
      throw;
    }
    return slot;
  }
  void commit(int replica, void* result) override {
    step_.committed_[step_.parity_][static_cast<size_t>(replica)] = static_cast<Slot*>(result);
  }
  void discard(int, void* result) override { step_.release(static_cast<Slot*>(result)); }
  // Followed by the update's stage: what the caller does between the two phases otherwise, on the
  // thread that committed the last replica.
  void stage_done() override {
    if (then_update_) step_.end_replicas();
  }

 private:
  ReplicatedStep& step_;
  ReplicaFn fn_;
  bool overlap_;  // this step's, fixed for every run (a late backup run may start after the step)
  bool then_update_;
};

class ReplicatedStep::ChunkPhase : public TaskPhase {
 public:
  ChunkPhase(ReplicatedStep& step, ChunkMode mode) : step_(step), mode_(mode) {}
  // Set by the step before each run of this phase, while no run of it is executing.
  ChunkInputs in;
  int num_tasks() const override { return static_cast<int>(step_.chunks_.size()); }
  int kind() const override { return 1; }
  profiler::Phase trace_phase() const override {
    return mode_ == ChunkMode::accumulate || mode_ == ChunkMode::sum ? profiler::Phase::local_reduce
                                                                     : profiler::Phase::update;
  }

  void* run(int task, int thread) override {
    ReplicatedStep& s = step_;
    Scratch& sc = *s.scratch_[static_cast<size_t>(thread)];
    const Chunk& c = s.chunks_[static_cast<size_t>(task)];
    sc.chunk = &c;
    // A backup usually loses by microseconds (it started when its twin was nearly done): it
    // checks for cancellation between slices of its chunk. Elementwise work, so the slices give
    // the bits of the whole; a first run goes straight through.
    if (TaskPool::in_backup_run() && c.n > 2 * kBackupSlice) {
      for (int64_t o = 0; o < c.n; o += kBackupSlice) {
        check_task_cancelled();
        run_part({c.var, c.offset + o, c.flat + o, std::min(kBackupSlice, c.n - o)},
                 static_cast<size_t>(o), sc);
      }
    } else {
      run_part(c, 0, sc);
    }
    return &sc;
  }

  // Elements [base, base + c.n) of the task's chunk: c is that part, and the scratch is indexed
  // from the chunk's start.
  void run_part(const Chunk& c, size_t base, Scratch& sc) {
    ReplicatedStep& s = step_;
    const size_t n = static_cast<size_t>(c.n);
    float* g = sc.g.data() + base;
    switch (mode_) {
      case ChunkMode::accumulate:
      case ChunkMode::sum:
        s.sum_chunk(c, in, g);
        return;
      case ChunkMode::apply_from_sum:
        // The sum stays where it is unless the rule writes its gradient (then into scratch, so
        // that a second run of this chunk reads the sum unchanged).
        if (s.update_.rewrites_gradient()) {
          std::memcpy(g, s.sum_ + c.flat, n * sizeof(float));
        } else {
          g = s.sum_ + c.flat;
        }
        break;
      case ChunkMode::apply:
        break;
    }
    const size_t i = c.var;
    const auto& cur_slots = s.cur_s_[i];
    for (size_t k = 0; k < cur_slots.size(); ++k) {
      sc.slot_in[k] = cur_slots[k] + c.offset;
      sc.slot_ptrs[k] = sc.slots[k].data() + base;
    }
    sc.has_rounded = s.next_r_[i] != nullptr;
    // Out of place: the current values stay as they were, so a second run of this chunk computes
    // the same bits. A task's first run writes the weights and slots straight to their next
    // buffers; a backup run writes them to this thread's scratch, and if it wins, commit()
    // publishes them through the step's spare buffers (publish_backup_updates), because the first
    // run may still be writing the next buffers. The bfloat16 rounding always goes to scratch and
    // is copied by the winner: it is a quarter of the bytes and keeps that copy single-writer.
    // Models larger than the caches write through scratch and non-temporal copies instead
    // (set_streaming_threshold).
    sc.direct = !s.stream_next_ && !TaskPool::in_backup_run();
    float* w_out = sc.direct ? s.next_w_[i] + c.offset : sc.w.data() + base;
    if (sc.direct) {
      for (size_t k = 0; k < cur_slots.size(); ++k) sc.slot_ptrs[k] = s.next_s_[i][k] + c.offset;
    }
    const float* w = s.cur_w_[i] + c.offset;
    const std::span<const float* const> slots_in(sc.slot_in.data(), cur_slots.size());
    const std::span<float* const> slots_out(sc.slot_ptrs.data(), cur_slots.size());
    float* rounded = sc.has_rounded ? sc.rounded.data() + base : nullptr;
    if (mode_ == ChunkMode::apply) {
      const float* terms[2];
      const int count = s.chunk_terms(c, in, terms);
      if (count == 2) {
        // Two terms (two local replicas, or one and the accumulator): the rule adds them as it
        // reads them, one pass instead of a sum pass and an update pass.
        s.update_.apply_sum_of_two(i, c.offset, w, terms[0], terms[1], g, slots_in, w_out,
                                   slots_out, n, rounded);
        return;
      }
      if (const float* only = s.sole_gradient(c, in); only != nullptr) {
        // One replica's gradient is the sum: read it where it is (apply() does not write it).
        g = const_cast<float*>(only);
      } else {
        profiler::ScopedSpan sum(profiler::Phase::local_reduce);
        s.sum_chunk(c, in, g);
      }
    }
    s.update_.apply(i, c.offset, w, g, slots_in, w_out, slots_out, n, rounded);
  }

  void commit(int task, void* result) override {
    ReplicatedStep& s = step_;
    const Scratch& sc = *static_cast<Scratch*>(result);
    const Chunk& c = *sc.chunk;
    const size_t bytes = static_cast<size_t>(c.n) * sizeof(float);
    switch (mode_) {
      case ChunkMode::accumulate:
        std::memcpy(s.accumulator_[1 - in.accumulator].data<float>() + c.flat, sc.g.data(), bytes);
        return;
      case ChunkMode::sum:
        std::memcpy(s.summed_.data<float>() + c.flat, sc.g.data(), bytes);
        return;
      case ChunkMode::apply_from_sum:
      case ChunkMode::apply:
        break;
    }
    const size_t i = c.var;
    const size_t n = static_cast<size_t>(c.n);
    if (sc.has_rounded) std::memcpy(s.next_r_[i] + c.offset, sc.rounded.data(), bytes);
    if (sc.direct) return;  // the weights and slots are in place already
    const bool streaming = s.stream_next_;
    // Without streaming only a backup writes scratch, and it won: the chunk's first run may still
    // be writing the next buffers, so the result goes to the spares.
    const bool to_spare = !streaming;
    if (to_spare) {
      s.allocate_spares(i);
      s.won_by_backup_[static_cast<size_t>(task)] = 1;
    }
    float* w_dst = to_spare ? s.spare_w_[i].data<float>() : s.next_w_[i];
    copy_next(w_dst + c.offset, sc.w.data(), n, streaming);
    for (size_t k = 0; k < s.next_s_[i].size(); ++k) {
      float* dst = to_spare ? s.spare_s_[i][k].data<float>() : s.next_s_[i][k];
      copy_next(dst + c.offset, sc.slots[k].data(), n, streaming);
    }
#if defined(__x86_64__) || defined(__i386__)
    // Non-temporal stores are weakly ordered: they must be visible before the pool publishes the
    // commit (a release) and another thread reads the next buffers.
    if (streaming) _mm_sfence();
#endif
  }
  void discard(int, void*) override {}

 private:
  ReplicatedStep& step_;
  ChunkMode mode_;
};

// ---- ReplicatedStep

ReplicatedStep::ReplicatedStep(Strategy& strategy, std::vector<Variable> vars,
                               ElementwiseUpdate& update,
                               std::function<std::unique_ptr<RunState>()> make_state)
    : strategy_(strategy),
      vars_(std::move(vars)),
      update_(update),
      make_state_(std::move(make_state)),
      num_local_(strategy.num_local_replicas()) {
  for (const Variable& v : vars_) {
    if (v.dtype() != DType::float32) {
      throw InvalidArgument("ReplicatedStep: trainable variable '" + v.name() + "' is " +
                            v.raw_value().describe() + "; variables must be float32.");
    }
  }
  update_.bind(vars_);
  for (size_t i = 0; i < vars_.size(); ++i) {
    slots_.push_back(update_.slot_variables(i));
    max_slots_ = std::max(max_slots_, slots_.back().size());
    vars_[i].enable_next_buffer();
    for (const Variable& sv : slots_.back()) {
      if (sv.dtype() != DType::float32 || !(sv.shape() == vars_[i].shape())) {
        throw Internal("ReplicatedStep: slot '" + sv.name() + "' of '" + vars_[i].name() +
                       "' must be float32 shaped like it; it is " + sv.raw_value().describe() +
                       ".");
      }
      sv.enable_next_buffer();
    }
    total_ += vars_[i].num_elements();
  }
  const int threads = strategy_.num_threads();
  chunk_ = std::clamp((total_ / (4 * threads) + 255) / 256 * 256, kMinChunk, kMaxChunk);
  for (size_t i = 0, flat = 0; i < vars_.size(); ++i) {
    const int64_t n = vars_[i].num_elements();
    for (int64_t off = 0; off < n; off += chunk_)
      chunks_.push_back({i, off, static_cast<int64_t>(flat) + off, std::min(chunk_, n - off)});
    flat += static_cast<size_t>(n);
  }
  {
    // Bytes the update writes per step (weights and slots); beyond what the caches of the cores
    // hold they are streamed (copy_next).
    const size_t written = static_cast<size_t>(total_) * sizeof(float) * (1 + max_slots_);
    stream_next_ = written > streaming_threshold();
  }
  won_by_backup_.assign(chunks_.size(), 0);
  spare_w_.resize(vars_.size());
  spare_s_.resize(vars_.size());
  accumulator_[0] = Tensor({std::max<int64_t>(total_, 1)}, DType::float32);
  accumulator_[1] = Tensor({std::max<int64_t>(total_, 1)}, DType::float32);
  make_buckets();
  // One scratch per thread that may run a chunk task, the busy-machine extras included.
  for (int t = 0, runners = strategy_.task_pool().total_threads(); t < runners; ++t) {
    auto sc = std::make_unique<Scratch>();
    const size_t chunk = static_cast<size_t>(chunk_);
    sc->g.resize(chunk);
    sc->w.resize(chunk);
    sc->rounded.resize(chunk);
    sc->slots.assign(max_slots_, std::vector<float>(chunk));
    sc->slot_ptrs.assign(max_slots_, nullptr);
    sc->slot_in.assign(max_slots_, nullptr);
    scratch_.push_back(std::move(sc));
  }
  const ChunkMode modes[4] = {ChunkMode::accumulate, ChunkMode::sum, ChunkMode::apply_from_sum,
                              ChunkMode::apply};
  for (int m = 0; m < 4; ++m) chunk_phases_[m] = std::make_unique<ChunkPhase>(*this, modes[m]);
  committed_[0].assign(static_cast<size_t>(num_local_), nullptr);
  committed_[1].assign(static_cast<size_t>(num_local_), nullptr);
  cur_w_.resize(vars_.size());
  next_w_.resize(vars_.size());
  next_r_.resize(vars_.size());
  cur_s_.resize(vars_.size());
  next_s_.resize(vars_.size());
}

void ReplicatedStep::set_streaming_threshold(size_t bytes) {
  g_streaming_threshold.store(bytes, std::memory_order_relaxed);
}

size_t ReplicatedStep::streaming_threshold() {
  return g_streaming_threshold.load(std::memory_order_relaxed);
}

ReplicatedStep::~ReplicatedStep() {
  wait_for_stragglers();
}

void ReplicatedStep::make_buckets() {
  // Groups of consecutive variables of about bytes_per_pack, formed from the last variable
  // backwards (the order backward produces them); the first at most 1 MiB so that communication
  // starts early (DDP's first_bucket_bytes).
  const size_t pack = strategy_.communication_options().bytes_per_pack
                          ? strategy_.communication_options().bytes_per_pack
                          : size_t{25} << 20;
  bucket_of_.assign(vars_.size(), 0);
  int64_t end = total_;
  size_t end_var = vars_.size();
  while (end_var > 0) {
    const size_t limit = buckets_.empty() ? std::min(pack, size_t{1} << 20) : pack;
    size_t first = end_var;
    int64_t begin = end;
    do {
      --first;
      begin -= vars_[first].num_elements();
    } while (first > 0 &&
             static_cast<size_t>(end - begin + vars_[first - 1].num_elements()) * sizeof(float) <=
                 limit);
    for (size_t v = first; v < end_var; ++v) bucket_of_[v] = buckets_.size();
    buckets_.push_back({first, end_var, begin, end});
    end_var = first;
    end = begin;
  }
  bucket_claimed_ = std::make_unique<std::atomic<uint32_t>[]>(buckets_.size());
  bucket_filled_.assign(buckets_.size(), 0);
}

void ReplicatedStep::bucket_ready(ReplicaRun& run, size_t b) {
  // The first run of the (only local) replica to finish a bucket ships it; every run computes
  // the same bits, so which one does not matter.
  if (bucket_claimed_[b].exchange(1, std::memory_order_acq_rel) != 0) return;
  const Bucket& bucket = buckets_[b];
  int64_t flat = bucket.begin;
  for (size_t v = bucket.first_var; v < bucket.end_var; ++v) {
    const int64_t n = vars_[v].num_elements();
    const size_t bytes = static_cast<size_t>(n) * sizeof(float);
    float* d = summed_.data<float>() + flat;
    if (run.defined_[v]) {
      std::memcpy(d, run.flat_.data<float>() + flat, bytes);
      if (overlap_accumulator_)
        ops::add_into(d, accumulator_[acc_current_].data<float>() + flat, n);
    } else if (overlap_accumulator_) {
      std::memcpy(d, accumulator_[acc_current_].data<float>() + flat, bytes);
    } else {
      std::memset(d, 0, bytes);
    }
    flat += n;
  }
  // Buckets enter the communication thread in bucket order on every worker (collectives must
  // match), whichever run filled them.
  std::lock_guard lock(bucket_mu_);
  bucket_filled_[b] = 1;
  const bool bf16 = strategy_.communication_options().gradient_dtype == DType::bfloat16;
  while (buckets_enqueued_ < buckets_.size() && bucket_filled_[buckets_enqueued_]) {
    const Bucket& q = buckets_[buckets_enqueued_];
    const size_t n = static_cast<size_t>(q.end - q.begin);
    if (bf16) {
      const float* src = summed_.data<float>() + q.begin;
      bfloat16* out = summed_bf16_.data() + q.begin;
      for (size_t i = 0; i < n; ++i) out[i] = bfloat16(src[i]);
      reducer_->enqueue_compressed(out, n);
    } else {
      reducer_->enqueue(summed_.data<float>() + q.begin, n, DType::float32, ReduceOp::SUM);
    }
    ++buckets_enqueued_;
  }
  bucket_cv_.notify_all();
}

void ReplicatedStep::wait_for_buckets() {
  // What is left of the all-reduce after backward: the part not hidden under it.
  profiler::ScopedSpan trace(profiler::Phase::all_reduce);
  {
    std::unique_lock lock(bucket_mu_);
    bucket_cv_.wait(lock, [this] { return buckets_enqueued_ == buckets_.size(); });
  }
  reducer_->wait();
  if (strategy_.communication_options().gradient_dtype == DType::bfloat16) {
    float* s = summed_.data<float>();
    for (size_t i = 0, n = static_cast<size_t>(total_); i < n; ++i)
      s[i] = static_cast<float>(summed_bf16_[i]);
  }
}

void ReplicatedStep::wait_for_stragglers() {
  strategy_.task_pool().wait_for_runs_before(UINT64_MAX);
}

ReplicatedStep::Slot* ReplicatedStep::acquire() {
  std::lock_guard lock(pool_mu_);
  if (free_.empty()) {
    auto s = std::make_unique<Slot>();
    ReplicaRun& r = s->run;
    // Room for the carried count after the gradients: a sole local replica's buffer may be the
    // step's sum across workers (sole_replica_sum).
    r.flat_ = Tensor({total_ + kCountSlots}, DType::float32);
    int64_t off = 0;
    for (const Variable& v : vars_) {
      r.views_.push_back(r.flat_.slice(off, off + v.num_elements()).reshape(v.shape()));
      off += v.num_elements();
    }
    r.defined_.assign(vars_.size(), 0);
    r.step_ = this;
    r.bucket_ready_.assign(buckets_.size(), 0);
    if (make_state_) r.state_ = make_state_();
    free_.push_back(s.get());
    slots_all_.push_back(std::move(s));
  }
  Slot* s = free_.back();
  free_.pop_back();
  return s;
}

void ReplicatedStep::release(Slot* s) {
  std::lock_guard lock(pool_mu_);
  free_.push_back(s);
}

RunState* ReplicatedStep::committed_state(int r) const {
  Slot* s = committed_[parity_].at(static_cast<size_t>(r));
  return s ? s->run.state() : nullptr;
}

SyncStats ReplicatedStep::stats() const {
  SyncStats s = stats_;
  TaskPoolStats p = strategy_.task_pool().stats();
  s.backup_runs = p.backups;
  s.backup_wins = p.backup_wins;
  return s;
}

bool ReplicatedStep::run_replicas(ReplicaFn fn, ChunkPhase* update) {
  TaskPool& pool = strategy_.task_pool();
  std::vector<Slot*>& committed = committed_[parity_];
  std::fill(committed.begin(), committed.end(), nullptr);
  if (!gang_) {
    // Reuse a retired phase object whose runs are over, else make one.
    const uint64_t now = pool.stats().phases;
    const bool then_update = update != nullptr;
    ReplicaPhase* phase = nullptr;
    for (auto& [p, seq] : replica_phases_) {
      if (seq + kPhaseRetention <= now) {
        p = std::make_unique<ReplicaPhase>(*this, fn, overlap_step_, then_update);
        phase = p.get();
        seq = now + 1;
        break;
      }
    }
    if (phase == nullptr) {
      replica_phases_.emplace_back(
          std::make_unique<ReplicaPhase>(*this, fn, overlap_step_, then_update), now + 1);
      phase = replica_phases_.back().first.get();
    }
    try {
      if (update != nullptr) {
        update->in = {parity_, acc_valid_, acc_current_};
        pool.run(*phase, *update);
        return true;
      }
      pool.run(*phase);
      // Per-replica state (random streams, moving statistics) changes once, in replica order.
      for (Slot* s : committed) s->run.commit();
      return false;
    } catch (const CollectiveInTask&) {
      for (Slot*& s : committed) {
        if (s) release(s);
        s = nullptr;
      }
      gang_ = true;
      if (overlap_step_) {
        // A collective in the forward pass comes before any gradient: no bucket has left.
        std::lock_guard lock(bucket_mu_);
        if (buckets_enqueued_ != 0) {
          throw Internal(
              "ReplicatedStep: a replica function called a collective after gradients had "
              "started crossing workers; call collectives before the backward pass.");
        }
        overlap_step_ = false;
      }
    }
  }
  // Gang: every replica at once, one thread each, with the local communicator.
  strategy_.run_on_replicas([&](ReplicaContext& ctx) {
    const int r = ctx.local_replica_id();
    profiler::ScopedSpan trace(profiler::Phase::replica, r);
    Slot* slot = acquire();
    slot->run.reset(r, false);
    ReplicaContext mine(strategy_, r, &ctx.local_communicator(), strategy_.cross_worker(),
                        &slot->run);
    ReplicaContextScope context(&mine);
    try {
      fn(mine, slot->run);
    } catch (...) {
      release(slot);
      throw;
    }
    committed[static_cast<size_t>(r)] = slot;
  });
  for (Slot* s : committed) s->run.commit();
  return false;
}

void ReplicatedStep::retire_previous_step() {
  // What the update overwrites — the variables' next buffers, the accumulator, the sum, the
  // previous step's gradient slots — no run of an earlier step may still read.
  strategy_.task_pool().wait_for_runs_before(step_first_phase_);
  for (Slot*& s : committed_[1 - parity_]) {
    if (s) release(s);
    s = nullptr;
  }
}

void ReplicatedStep::end_replicas() {
  replicas_ended_ = Clock::now();
  for (Slot* s : committed_[parity_]) s->run.commit();
  apply_deferred_sums();
  prepare_buffers();
  update_.begin_update({});
}

void ReplicatedStep::finish_update() {
  publish_backup_updates();
  for (size_t i = 0; i < vars_.size(); ++i) {
    vars_[i].flip_buffers();
    for (const Variable& sv : slots_[i]) sv.flip_buffers();
  }
  update_.end_update();
  acc_valid_ = false;
}

int64_t ReplicatedStep::deferred_count_from_sums(double sum, double sum_of_squares, int workers) {
  // Sums of small whole numbers are exact in float32 below 2^24, whatever order they were added in.
  constexpr double kExact = 16777216.0;
  if (!(sum >= 0 && sum_of_squares >= 0 && sum < kExact && sum_of_squares < kExact)) return -1;
  if (static_cast<double>(workers) * sum_of_squares != sum * sum) {
    throw FailedPrecondition(
        "ReplicatedStep: the workers' replicas produced different numbers of statistics to sum "
        "after this step (" +
        std::to_string(static_cast<int64_t>(sum)) + " in all over " + std::to_string(workers) +
        " workers, not the same on each): a worker had no examples for a layer that sums "
        "statistics across replicas (BatchNormalization). Use a global batch of at least one "
        "example per worker.");
  }
  return static_cast<int64_t>(sum) / workers;
}

size_t ReplicatedStep::deferred_sum_count() const {
  std::vector<const void*> keys;
  for (const Slot* s : committed_[parity_]) {
    for (const auto& d : s->run.deferred_) {
      if (std::find(keys.begin(), keys.end(), d.key) == keys.end()) keys.push_back(d.key);
    }
  }
  return keys.size();
}

void ReplicatedStep::apply_deferred_sums(const float* carried) {
  struct Entry {
    const void* key;
    Tensor total;
    std::function<void(const Tensor&)>* apply;
  };
  std::vector<Entry> entries;
  for (Slot* s : committed_[parity_]) {
    for (auto& d : s->run.deferred_) {
      auto it = std::find_if(entries.begin(), entries.end(),
                             [&](const Entry& e) { return e.key == d.key; });
      if (it == entries.end()) {
        entries.push_back({d.key, d.value.clone(), &d.apply});
        continue;
      }
      if (!(it->total.shape() == d.value.shape())) {
        throw InvalidArgument("sum_after_step: replicas summed values of different shapes: " +
                              it->total.describe() + " and " + d.value.describe() + ".");
      }
      ops::add_into(it->total, d.value);
    }
  }
  if (Communicator* cross = strategy_.cross_worker()) {
    profiler::ScopedSpan trace(profiler::Phase::all_reduce);
    // Every worker must sum the same values: a worker whose replicas all had empty slices has
    // none to offer, which the others cannot fill in.
    if (carried != nullptr &&
        deferred_count_from_sums(carried[0], carried[1], cross->size()) >= 0) {
      for (Entry& e : entries) cross->all_reduce(e.total, ReduceOp::SUM);
      for (Entry& e : entries) (*e.apply)(e.total);
      return;
    }
    int64_t counts[2] = {static_cast<int64_t>(entries.size()),
                         -static_cast<int64_t>(entries.size())};
    cross->all_reduce(counts, 2, DType::int64, ReduceOp::MAX);
    const int64_t most = counts[0], fewest = -counts[1];
    if (most != fewest) {
      throw FailedPrecondition(
          "ReplicatedStep: the workers' replicas produced different numbers of statistics to sum "
          "after this step (" +
          std::to_string(fewest) + " to " + std::to_string(most) +
          "): a worker had no examples for a layer that sums statistics across replicas "
          "(BatchNormalization). Use a global batch of at least one example per worker.");
    }
    for (Entry& e : entries) cross->all_reduce(e.total, ReduceOp::SUM);
  }
  for (Entry& e : entries) (*e.apply)(e.total);
}

const float* ReplicatedStep::sole_gradient(const Chunk& c, const ChunkInputs& in) const {
  if (in.with_accumulator || update_.rewrites_gradient()) return nullptr;
  const float* only = nullptr;
  for (const Slot* s : committed_[in.parity]) {
    if (!s->run.defined_[c.var]) continue;
    if (only != nullptr) return nullptr;
    only = s->run.flat_.data<float>() + c.flat;
  }
  return only;
}

float* ReplicatedStep::sole_replica_sum() {
  if (acc_valid_) return nullptr;
  Slot* only = nullptr;
  for (Slot* s : committed_[parity_]) {
    const auto& defined = s->run.defined_;
    if (std::find(defined.begin(), defined.end(), 1) == defined.end()) continue;  // all zeros
    if (only != nullptr) return nullptr;
    only = s;
  }
  if (only == nullptr) return nullptr;
  const auto& defined = only->run.defined_;
  if (std::find(defined.begin(), defined.end(), 0) != defined.end()) return nullptr;
  return only->run.flat_.data<float>();
}

void ReplicatedStep::allocate_spares(size_t i) {
  std::lock_guard lock(spare_mu_);
  if (spare_w_[i].defined()) return;
  spare_w_[i] = Tensor(vars_[i].shape(), DType::float32);
  for (const Variable& sv : slots_[i]) spare_s_[i].emplace_back(sv.shape(), DType::float32);
}

void ReplicatedStep::publish_backup_updates() {
  if (std::find(won_by_backup_.begin(), won_by_backup_.end(), 1) == won_by_backup_.end()) return;
  // Per variable with a chunk a backup won: its spare buffers get the chunks the first runs
  // wrote (complete: each committed), then become the next buffers; the old next storage, where a
  // losing first run may still be writing, becomes the spare. It is written again only after
  // that run has ended (run() waits for the runs of earlier steps before any update).
  for (size_t c = 0; c < chunks_.size();) {
    const size_t i = chunks_[c].var;
    size_t end = c;
    bool won = false;
    for (; end < chunks_.size() && chunks_[end].var == i; ++end) won = won || won_by_backup_[end];
    if (won) {
      for (size_t k = c; k < end; ++k) {
        if (won_by_backup_[k]) continue;
        const Chunk& ck = chunks_[k];
        const size_t bytes = static_cast<size_t>(ck.n) * sizeof(float);
        std::memcpy(spare_w_[i].data<float>() + ck.offset, next_w_[i] + ck.offset, bytes);
        for (size_t j = 0; j < next_s_[i].size(); ++j)
          std::memcpy(spare_s_[i][j].data<float>() + ck.offset, next_s_[i][j] + ck.offset, bytes);
      }
      vars_[i].swap_next_storage(spare_w_[i]);
      for (size_t j = 0; j < slots_[i].size(); ++j) slots_[i][j].swap_next_storage(spare_s_[i][j]);
    }
    c = end;
  }
  std::fill(won_by_backup_.begin(), won_by_backup_.end(), 0);
  ++stats_.backup_publishes;
}

int ReplicatedStep::chunk_terms(const Chunk& c, const ChunkInputs& in,
                                const float* terms[2]) const {
  int count = 0;
  auto term = [&](const float* t) {
    if (count < 2) terms[count] = t;
    ++count;
  };
  if (in.with_accumulator) term(accumulator_[in.accumulator].data<float>() + c.flat);
  for (const Slot* s : committed_[in.parity]) {
    if (s->run.defined_[c.var]) term(s->run.flat_.data<float>() + c.flat);
  }
  return count;
}

void ReplicatedStep::sum_chunk(const Chunk& c, const ChunkInputs& in, float* out) const {
  // The terms in their fixed order, the accumulator first, then the replicas in order: the sum is
  // ((t_0 + t_1) + t_2) + ... whatever thread runs it.
  const float* first = nullptr;
  bool summed = false;
  auto term = [&](const float* t) {
    if (summed) {
      ops::add_into(out, t, c.n);
    } else if (first != nullptr) {
      ops::sum_into(out, first, t, c.n);
      summed = true;
    } else {
      first = t;
    }
  };
  if (in.with_accumulator) term(accumulator_[in.accumulator].data<float>() + c.flat);
  for (const Slot* s : committed_[in.parity]) {
    if (s->run.defined_[c.var]) term(s->run.flat_.data<float>() + c.flat);
  }
  const size_t bytes = static_cast<size_t>(c.n) * sizeof(float);
  if (summed) return;
  if (first != nullptr) {
    std::memcpy(out, first, bytes);
  } else {
    std::memset(out, 0, bytes);
  }
}

void ReplicatedStep::run_chunks(ChunkMode mode) {
  ChunkPhase& phase = *chunk_phases_[static_cast<int>(mode)];
  phase.in = {parity_, acc_valid_, acc_current_};
  strategy_.task_pool().run(phase);
}

void ReplicatedStep::prepare_buffers() {
  for (size_t i = 0; i < vars_.size(); ++i) {
    cur_w_[i] = vars_[i].raw_value().data<float>();
    next_w_[i] = vars_[i].next_value().data<float>();
    next_r_[i] = update_.rounded_output(i);
    cur_s_[i].clear();
    next_s_[i].clear();
    for (const Variable& sv : slots_[i]) {
      cur_s_[i].push_back(sv.raw_value().data<float>());
      next_s_[i].push_back(sv.next_value().data<float>());
    }
  }
}

void ReplicatedStep::all_reduce_across_workers(int64_t extra) {
  profiler::ScopedSpan trace(profiler::Phase::all_reduce);
  Communicator* cross = strategy_.cross_worker();
  const size_t n = static_cast<size_t>(total_ + extra);
  if (strategy_.communication_options().gradient_dtype == DType::bfloat16) {
    summed_bf16_.resize(n);
    float* s = sum_;
    for (size_t i = 0; i < n; ++i) summed_bf16_[i] = bfloat16(s[i]);
    cross->all_reduce_compressed(summed_bf16_.data(), n);
    for (size_t i = 0; i < n; ++i) s[i] = static_cast<float>(summed_bf16_[i]);
  } else {
    cross->all_reduce(sum_, n, DType::float32, ReduceOp::SUM);
  }
}

void ReplicatedStep::run(ReplicaFn fn, bool apply) {
  // The step's phases of tasks and what runs between them.
  profiler::ScopedSpan trace(profiler::Phase::tasks);
  TaskPool& pool = strategy_.task_pool();
  step_first_phase_ = pool.stats().phases + 1;
  parity_ = 1 - parity_;
  // Overlap the cross-worker sum with backward when one local replica feeds it (several local
  // replicas sum after their phase; see docs/distributed.md).
  const bool overlapped =
      apply && !gang_ && num_local_ == 1 && strategy_.num_workers() > 1 && buckets_.size() > 1;
  if (overlapped) {
    // The buckets are written during the replica phase: nothing of the previous step may read
    // the sum any more.
    pool.wait_for_runs_before(step_first_phase_);
    if (!summed_.defined()) summed_ = Tensor({total_ + kCountSlots}, DType::float32);
    if (strategy_.communication_options().gradient_dtype == DType::bfloat16)
      summed_bf16_.resize(static_cast<size_t>(total_));
    if (!reducer_) reducer_ = std::make_unique<BackgroundReducer>(strategy_.cross_worker_shared());
    for (size_t b = 0; b < buckets_.size(); ++b) bucket_claimed_[b].store(0);
    std::fill(bucket_filled_.begin(), bucket_filled_.end(), 0);
    buckets_enqueued_ = 0;
    overlap_accumulator_ = acc_valid_;
    overlap_step_ = true;
  }
  const bool workers = strategy_.num_workers() > 1;
  // The common step — an update on one worker, no gradient norms — is one phase in two stages:
  // the replicas, then the update; the previous step is retired before it rather than between
  // the phases.
  const bool staged = apply && !gang_ && !workers && !update_.wants_gradient_norms();
  if (staged) {
    retire_previous_step();
    if (run_replicas(std::move(fn), chunk_phases_[static_cast<int>(ChunkMode::apply)].get())) {
      finish_update();
      stats_.steps += 1;
      stats_.local_seconds += seconds_since(replicas_ended_);
      stats_.bytes_per_step = static_cast<size_t>(total_) * sizeof(float);
      return;
    }
  } else {
    run_replicas(std::move(fn));
  }

  const auto t0 = Clock::now();
  retire_previous_step();

  if (overlap_step_) {
    const auto tc = Clock::now();
    wait_for_buckets();  // what is left of the communication after backward
    stats_.cross_worker_seconds += seconds_since(tc);
    overlap_step_ = false;
  }
  // After the buckets: the communicator has one user at a time. A step whose gradients cross
  // workers in float32 in one all-reduce carries the deferred sums' count check in it
  // (deferred_count_from_sums): one collective per step fewer.
  const bool carry_counts = apply && workers && !overlapped &&
                            strategy_.communication_options().gradient_dtype == DType::float32;
  if (!carry_counts) apply_deferred_sums();
  if (!apply) {
    run_chunks(ChunkMode::accumulate);
    acc_current_ = 1 - acc_current_;
    acc_valid_ = true;
  } else {
    prepare_buffers();
    if (workers || update_.wants_gradient_norms()) {
      if (!summed_.defined()) summed_ = Tensor({total_ + kCountSlots}, DType::float32);
      sum_ = summed_.data<float>();
      if (!overlapped) {
        // One local replica with every gradient: its buffer is the local sum, summed across
        // workers in place (no sum phase, whose chunks copy the gradient twice).
        if (float* sole = sole_replica_sum(); sole != nullptr) {
          sum_ = sole;
        } else {
          run_chunks(ChunkMode::sum);
        }
        if (workers) {
          const auto tc = Clock::now();
          float* counts = sum_ + total_;
          if (carry_counts) {
            const auto n = static_cast<float>(deferred_sum_count());
            counts[0] = n;
            counts[1] = n * n;
          }
          all_reduce_across_workers(carry_counts ? kCountSlots : 0);
          stats_.cross_worker_seconds += seconds_since(tc);
          if (carry_counts) apply_deferred_sums(counts);
        }
      }
      std::vector<double> norms;
      if (update_.wants_gradient_norms()) {
        const float* g = sum_;
        int64_t off = 0;
        for (const Variable& v : vars_) {
          double sq = 0;
          for (int64_t j = 0, n = v.num_elements(); j < n; ++j)
            sq += static_cast<double>(g[off + j]) * g[off + j];
          norms.push_back(sq);
          off += v.num_elements();
        }
      }
      update_.begin_update(norms);
      run_chunks(ChunkMode::apply_from_sum);
    } else {
      update_.begin_update({});
      run_chunks(ChunkMode::apply);
    }
    finish_update();
  }
  stats_.steps += 1;
  stats_.local_seconds += seconds_since(t0);
  stats_.bytes_per_step =
      static_cast<size_t>(total_) *
      (workers ? dtype_size(strategy_.communication_options().gradient_dtype) : sizeof(float));
}

}  // namespace lockstep::distribute
