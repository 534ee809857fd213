#include "buffered_update.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "lockstep/core/cpu_isa.h"
#include "lockstep/core/error.h"
#include "lockstep/core/profiler.h"
#include "lockstep/core/task_cancellation.h"
#include "task_pool.h"

namespace lockstep::distribute {

namespace {

// The update writes each chunk's new values out of place, into the variables' next buffers. For a
// model whose update state is larger than the caches, those writes would first read every line
// they replace (a write-allocate) although nothing reads it before the next step: non-temporal
// stores skip that read, a third of the update's memory traffic. Small models keep ordinary
// stores, which leave the values in cache for the next step — except, on AMD CPUs, the float32
// values the replicas multiply by when several cores run them: every core's forward pass read that
// buffer's lines a step ago, so an ordinary store must first take each line back from the other
// cores' caches, while a non-temporal one invalidates them and writes around the caches. On the
// Intel Xeon measured, the ordinary store's transfer cost less than the next step's reads from
// memory (BufferedUpdate::stream_shared_reads). Elsewhere
// (aarch64, whose STNP is only a hint GCC has no intrinsic for) every copy is a memcpy, and no
// fence is needed after it.
void copy_next(void* dst, const void* src, size_t bytes, bool streaming) {
#if defined(__x86_64__) || defined(__i386__)
  if (streaming) {
    auto* d = static_cast<char*>(dst);
    const auto* s = static_cast<const char*>(src);
    const size_t head = std::min(bytes, (16 - (reinterpret_cast<uintptr_t>(d) & 15)) & 15);
    std::memcpy(d, s, head);
    size_t i = head;
    for (; i + 16 <= bytes; i += 16) {
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i),
                       _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i)));
    }
    std::memcpy(d + i, s + i, bytes - i);
    return;
  }
#endif
  (void)streaming;
  std::memcpy(dst, src, bytes);
}

// Non-temporal stores are weakly ordered: they must be visible before the pool publishes the
// commit (a release) and another thread reads what they wrote.
void fence_streaming_stores() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_sfence();
#endif
}

std::atomic<size_t> g_streaming_threshold{size_t{16} << 20};
// -1: not set (the CPU's vendor decides).
std::atomic<int> g_stream_shared_reads{-1};
std::atomic<BufferedUpdate::InPlace> g_in_place{BufferedUpdate::InPlace::when_quiet};

// Elements a backup run of a chunk computes between two cancellation checks: about as long as
// the pool takes to notice that the first run committed.
constexpr int64_t kBackupSlice = 2048;

}  // namespace

struct BufferedUpdate::Scratch {
  std::vector<float> g, w, rounded;
  std::vector<bfloat16> rounded_bf16;
  std::vector<std::vector<float>> slots;
  std::vector<float*> slot_ptrs;
  std::vector<const float*> slot_in;
  const Chunk* chunk = nullptr;
  bool direct = false;  // this run wrote the weights and slots straight to the next buffers
  // ... and the rounding of each kind straight to the rule's rounded output.
  bool values_direct = false, bf16_direct = false;
};

class BufferedUpdate::Phase : public TaskPhase {
 public:
  explicit Phase(BufferedUpdate& u) : u_(u) {}
  int num_tasks() const override { return static_cast<int>(u_.layout_.chunks().size()); }
  int kind() const override { return 1; }
  int64_t task_cost(int task) const override {
    return u_.layout_.chunks()[static_cast<size_t>(task)].n;
  }
  profiler::Phase trace_phase() const override { return profiler::Phase::update; }
  void* run(int task, int thread) override {
    return u_.run_chunk(task, thread, TaskPool::in_backup_run());
  }
  void commit(int task, void* result) override { u_.commit_chunk(task, result); }
  void discard(int, void*) override {}
  bool allows_backups() const override { return !u_.in_place_; }

 private:
  BufferedUpdate& u_;
};

BufferedUpdate::BufferedUpdate(const ChunkLayout& layout, std::vector<Variable> vars,
                               ElementwiseUpdate& rule, int threads)
    : layout_(layout), vars_(std::move(vars)), rule_(rule) {
  for (const Variable& v : vars_) {
    if (v.dtype() != DType::float32) {
      throw InvalidArgument("ReplicatedStep: trainable variable '" + v.name() + "' is " +
                            v.raw_value().describe() + "; variables must be float32.");
    }
  }
  rule_.bind(vars_);
  for (size_t i = 0; i < vars_.size(); ++i) {
    slots_.push_back(rule_.slot_variables(i));
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
  }
  // Bytes the update writes per step (weights and slots); beyond what the caches of the cores
  // hold they are streamed (copy_next).
  const size_t written = static_cast<size_t>(layout_.total()) * sizeof(float) * (1 + max_slots_);
  streaming_ = written > streaming_threshold();
#if defined(__x86_64__) || defined(__i386__)
  shared_reads_ = !streaming_ && threads > 1 && stream_shared_reads();
#endif
  direct_rounded_ = rule_.swaps_rounded_output();
  won_by_backup_.assign(layout_.chunks().size(), 0);
  spare_w_.resize(vars_.size());
  spare_s_.resize(vars_.size());
  spare_r_.resize(vars_.size());
  // One scratch per thread that may run a chunk task, the busy-machine extras included.
  const size_t chunk = static_cast<size_t>(layout_.chunk_size());
  for (int t = 0; t < threads; ++t) {
    auto sc = std::make_unique<Scratch>();
    sc->g.resize(chunk);
    sc->w.resize(chunk);
    sc->rounded.resize(chunk);
    sc->rounded_bf16.resize(chunk);
    sc->slots.assign(max_slots_, std::vector<float>(chunk));
    sc->slot_ptrs.assign(max_slots_, nullptr);
    sc->slot_in.assign(max_slots_, nullptr);
    scratch_.push_back(std::move(sc));
  }
  phase_ = std::make_unique<Phase>(*this);
  cur_w_.resize(vars_.size());
  next_w_.resize(vars_.size());
  next_r_.resize(vars_.size());
  cur_s_.resize(vars_.size());
  next_s_.resize(vars_.size());
}

BufferedUpdate::~BufferedUpdate() = default;

void BufferedUpdate::set_streaming_threshold(size_t bytes) {
  g_streaming_threshold.store(bytes, std::memory_order_relaxed);
}

size_t BufferedUpdate::streaming_threshold() {
  return g_streaming_threshold.load(std::memory_order_relaxed);
}

void BufferedUpdate::set_stream_shared_reads(bool on) {
  g_stream_shared_reads.store(on ? 1 : 0, std::memory_order_relaxed);
}

bool BufferedUpdate::stream_shared_reads() {
  const int on = g_stream_shared_reads.load(std::memory_order_relaxed);
  return on < 0 ? cpu_vendor() == CpuVendor::amd : on != 0;
}

void BufferedUpdate::set_in_place(InPlace mode) {
  g_in_place.store(mode, std::memory_order_relaxed);
}

BufferedUpdate::InPlace BufferedUpdate::in_place_mode() {
  return g_in_place.load(std::memory_order_relaxed);
}

void BufferedUpdate::begin_update(std::span<const double> squared_norms, bool in_place) {
  in_place_ = in_place;
  for (size_t i = 0; i < vars_.size(); ++i) {
    float* cur = vars_[i].raw_value().data<float>();
    cur_w_[i] = cur;
    next_w_[i] = in_place ? cur : vars_[i].next_value().data<float>();
    next_r_[i] = in_place ? rule_.rounded_output_in_place(i) : rule_.rounded_output(i);
    cur_s_[i].clear();
    next_s_[i].clear();
    for (const Variable& sv : slots_[i]) {
      float* cur_slot = sv.raw_value().data<float>();
      cur_s_[i].push_back(cur_slot);
      next_s_[i].push_back(in_place ? cur_slot : sv.next_value().data<float>());
    }
  }
  rule_.begin_update(squared_norms);
}

TaskPhase& BufferedUpdate::phase_summing(const GradientReducer::Terms& terms) {
  terms_ = terms;
  sum_ = nullptr;
  return *phase_;
}

TaskPhase& BufferedUpdate::phase_from_sum(float* sum) {
  sum_ = sum;
  return *phase_;
}

void* BufferedUpdate::run_chunk(int task, int thread, bool backup) {
  Scratch& sc = *scratch_[static_cast<size_t>(thread)];
  const Chunk& c = layout_.chunks()[static_cast<size_t>(task)];
  sc.chunk = &c;
  // A backup usually loses by microseconds (it started when its twin was nearly done): it
  // checks for cancellation between slices of its chunk. Elementwise work, so the slices give
  // the bits of the whole; a first run goes straight through.
  if (backup && c.n > 2 * kBackupSlice) {
    for (int64_t o = 0; o < c.n; o += kBackupSlice) {
      check_task_cancelled();
      run_part({c.var, c.offset + o, c.flat + o, std::min(kBackupSlice, c.n - o)},
               static_cast<size_t>(o), sc, backup);
    }
  } else {
    run_part(c, 0, sc, backup);
  }
  return &sc;
}

// Elements [base, base + c.n) of the task's chunk: c is that part, and the scratch is indexed
// from the chunk's start.
void BufferedUpdate::run_part(const Chunk& c, size_t base, Scratch& sc, bool backup) {
  const size_t n = static_cast<size_t>(c.n);
  float* g = sc.g.data() + base;
  if (sum_ != nullptr) {
    // The sum stays where it is unless the rule writes its gradient (then into scratch, so that
    // a second run of this chunk reads the sum unchanged).
    if (rule_.rewrites_gradient()) {
      std::memcpy(g, sum_ + c.flat, n * sizeof(float));
    } else {
      g = sum_ + c.flat;
    }
  }
  const size_t i = c.var;
  const auto& cur_slots = cur_s_[i];
  for (size_t k = 0; k < cur_slots.size(); ++k) {
    sc.slot_in[k] = cur_slots[k] + c.offset;
    sc.slot_ptrs[k] = sc.slots[k].data() + base;
  }
  // Out of place: the current values stay as they were, so a second run of this chunk computes
  // the same bits. A task's first run writes the weights and slots straight to their next
  // buffers; a backup run writes them to this thread's scratch, and if it wins, commit_chunk()
  // publishes them through the spare buffers (publish_backup_updates), because the first run may
  // still be writing the next buffers. The rule's rounding of the weights follows them when the
  // rule can swap a spare in for it (swaps_rounded_output); otherwise it goes to scratch and the
  // winner copies it, which keeps that copy single-writer. In place the next buffers are the
  // current ones and a chunk has no backup.
  sc.direct = !backup;
  float* w_out = sc.direct ? next_w_[i] + c.offset : sc.w.data() + base;
  if (sc.direct) {
    for (size_t k = 0; k < cur_slots.size(); ++k) sc.slot_ptrs[k] = next_s_[i][k] + c.offset;
  }
  const float* w = cur_w_[i] + c.offset;
  const std::span<const float* const> slots_in(sc.slot_in.data(), cur_slots.size());
  const std::span<float* const> slots_out(sc.slot_ptrs.data(), cur_slots.size());
  // The rounding likewise, when the rule can swap in a spare for a chunk a backup wins.
  sc.values_direct = sc.direct && direct_rounded_ && next_r_[i].values != nullptr;
  sc.bf16_direct = sc.direct && direct_rounded_ && next_r_[i].bf16 != nullptr;
  // A first run streams the weights and slots of a model beyond the caches, and, when
  // shared_reads_ (copy_next says why), what the replicas multiply by: the weights themselves, or
  // the rounding it writes directly.
  const Streamed streamed{.weights = sc.direct && (streaming_ || (shared_reads_ && !next_r_[i])),
                          .slots = sc.direct && streaming_,
                          .rounded = (sc.values_direct || sc.bf16_direct) && shared_reads_};
  RoundedOut rounded;
  if (next_r_[i].values != nullptr) {
    rounded.values = sc.values_direct ? next_r_[i].values + c.offset : sc.rounded.data() + base;
  }
  if (next_r_[i].bf16 != nullptr) {
    if (sc.bf16_direct) {
      rounded = next_r_[i].at(static_cast<size_t>(c.offset));
    } else {
      rounded.bf16 = sc.rounded_bf16.data() + base;
    }
  }
  GradientReducer::Term terms[2];
  const int count = sum_ == nullptr ? GradientReducer::chunk_terms(c, terms_, terms) : 0;
  if ((count >= 1 && terms[0].bf16 != nullptr) || (count >= 2 && terms[1].bf16 != nullptr))
    bf16_chunks_.fetch_add(1, std::memory_order_relaxed);
  if (count == 2 && terms[0].f32 != nullptr && terms[1].f32 != nullptr) {
    // Two terms (two local replicas, or one and the accumulator): the rule adds them as it
    // reads them, one pass instead of a sum pass and an update pass.
    rule_.apply_sum_of_two(i, c.offset, w, terms[0].f32, terms[1].f32, g, slots_in, w_out,
                           slots_out, n, rounded, streamed);
  } else if (count == 2 && terms[0].bf16 != nullptr && terms[1].bf16 != nullptr) {
    // Two replicas' bfloat16 gradients (ReplicaRun::gradient_buffers): widened as they are read.
    rule_.apply_sum_of_two(i, c.offset, w, terms[0].bf16, terms[1].bf16, g, slots_in, w_out,
                           slots_out, n, rounded, streamed);
  } else {
    if (sum_ == nullptr) {
      const float* only =
          rule_.rewrites_gradient() ? nullptr : GradientReducer::sole_gradient(c, terms_);
      if (only != nullptr) {
        // One replica's gradient is the sum: read it where it is (apply() does not write it).
        g = const_cast<float*>(only);
      } else {
        profiler::ScopedSpan sum(profiler::Phase::local_reduce);
        GradientReducer::sum_chunk(c, terms_, g);
      }
    }
    rule_.apply(i, c.offset, w, g, slots_in, w_out, slots_out, n, rounded, streamed);
  }
  if (streamed) fence_streaming_stores();
}

void BufferedUpdate::commit_chunk(int task, void* result) {
  const Scratch& sc = *static_cast<Scratch*>(result);
  const Chunk& c = *sc.chunk;
  const size_t i = c.var;
  const size_t n = static_cast<size_t>(c.n);
  const RoundedOut& r = next_r_[i];
  // A backup's rounding of a kind first runs write directly goes to the spare, as its weights do.
  const bool rounded_to_spare = !sc.direct && direct_rounded_;
  if (rounded_to_spare) allocate_spares(i);
  if (r.values != nullptr && !sc.values_direct) {
    float* dst = rounded_to_spare ? spare_r_[i].data<float>() : r.values;
    const bool stream = shared_reads_ && !rounded_to_spare;
    copy_next(dst + c.offset, sc.rounded.data(), n * sizeof(float), stream);
    if (stream) fence_streaming_stores();
  }
  if (r.bf16 != nullptr && !sc.bf16_direct) {
    bfloat16* dst = rounded_to_spare ? spare_r_[i].data<bfloat16>() : r.bf16;
    if (r.layout != nullptr) {
      RoundedOut{.bf16 = dst, .layout = r.layout}.store(static_cast<size_t>(c.offset),
                                                        sc.rounded_bf16.data(), n);
    } else {
      copy_next(dst + c.offset, sc.rounded_bf16.data(), n * sizeof(bfloat16), false);
    }
  }
  if (sc.direct) return;  // the weights and slots are in place already
  // Only a backup writes scratch, and it won: the chunk's first run may still be writing the next
  // buffers, so the result goes to the spares.
  allocate_spares(i);
  won_by_backup_[static_cast<size_t>(task)] = 1;
  copy_next(spare_w_[i].data<float>() + c.offset, sc.w.data(), n * sizeof(float), streaming_);
  for (size_t k = 0; k < next_s_[i].size(); ++k) {
    copy_next(spare_s_[i][k].data<float>() + c.offset, sc.slots[k].data(), n * sizeof(float),
              streaming_);
  }
  if (streaming_) fence_streaming_stores();
}

BufferedUpdate::DirectRounded BufferedUpdate::direct_rounded(size_t i) const {
  const RoundedOut& r = next_r_[i];
  if (!direct_rounded_) return {};
  if (r.bf16 != nullptr) return {r.bf16, DType::bfloat16, r.layout};
  if (r.values != nullptr) return {r.values, DType::float32};
  return {};
}

void BufferedUpdate::allocate_spares(size_t i) {
  std::lock_guard lock(spare_mu_);
  // The rounded output's spare, for the kind first runs write directly (the kind can change
  // between updates).
  const DirectRounded rounded = direct_rounded(i);
  if (rounded.layout != nullptr) {
    // Laid out for a matmul: its padding is zero, and only the matrix's elements are written.
    const Shape shape{rounded.layout->size};
    if (!spare_r_[i].defined() || spare_r_[i].shape() != shape)
      spare_r_[i] = Tensor::zeros(shape, DType::bfloat16);
  } else if (rounded.data != nullptr &&
             (!spare_r_[i].defined() || spare_r_[i].dtype() != rounded.dtype ||
              spare_r_[i].shape() != vars_[i].shape())) {
    spare_r_[i] = Tensor(vars_[i].shape(), rounded.dtype);
  }
  if (spare_w_[i].defined()) return;
  spare_w_[i] = Tensor(vars_[i].shape(), DType::float32);
  for (const Variable& sv : slots_[i]) spare_s_[i].emplace_back(sv.shape(), DType::float32);
}

void BufferedUpdate::publish_backup_updates() {
  if (std::find(won_by_backup_.begin(), won_by_backup_.end(), 1) == won_by_backup_.end()) return;
  // Per variable with a chunk a backup won: its spare buffers get the chunks the first runs
  // wrote (complete: each committed), then become the next buffers; the old next storage, where a
  // losing first run may still be writing, becomes the spare. It is written again only after
  // that run has ended (the step waits for the runs of earlier steps before any update).
  const std::vector<Chunk>& chunks = layout_.chunks();
  for (size_t c = 0; c < chunks.size();) {
    const size_t i = chunks[c].var;
    size_t end = c;
    bool won = false;
    for (; end < chunks.size() && chunks[end].var == i; ++end) won = won || won_by_backup_[end];
    if (won) {
      // The rounded output too when first runs wrote it directly (allocate_spares made its spare).
      const DirectRounded direct = direct_rounded(i);
      const void* rounded = direct.data;
      const size_t rounded_size =
          direct.dtype == DType::bfloat16 ? sizeof(bfloat16) : sizeof(float);
      for (size_t k = c; k < end; ++k) {
        if (won_by_backup_[k]) continue;
        const Chunk& ck = chunks[k];
        const size_t bytes = static_cast<size_t>(ck.n) * sizeof(float);
        std::memcpy(spare_w_[i].data<float>() + ck.offset, next_w_[i] + ck.offset, bytes);
        for (size_t j = 0; j < next_s_[i].size(); ++j)
          std::memcpy(spare_s_[i][j].data<float>() + ck.offset, next_s_[i][j] + ck.offset, bytes);
        if (rounded != nullptr && direct.layout != nullptr) {
          copy_paired_rows(*direct.layout, static_cast<const uint16_t*>(rounded),
                           static_cast<uint16_t*>(spare_r_[i].raw_data()), ck.offset, ck.n);
        } else if (rounded != nullptr) {
          const size_t at = static_cast<size_t>(ck.offset) * rounded_size;
          std::memcpy(static_cast<char*>(spare_r_[i].raw_data()) + at,
                      static_cast<const char*>(rounded) + at,
                      static_cast<size_t>(ck.n) * rounded_size);
        }
      }
      vars_[i].swap_next_storage(spare_w_[i]);
      for (size_t j = 0; j < slots_[i].size(); ++j) slots_[i][j].swap_next_storage(spare_s_[i][j]);
      if (rounded != nullptr) rule_.swap_rounded_output(i, spare_r_[i]);
    }
    c = end;
  }
  std::fill(won_by_backup_.begin(), won_by_backup_.end(), 0);
  ++backup_publishes_;
}

void BufferedUpdate::end_update() {
  publish_backup_updates();
  for (size_t i = 0; i < vars_.size() && !in_place_; ++i) {
    vars_[i].flip_buffers();
    for (const Variable& sv : slots_[i]) sv.flip_buffers();
  }
  rule_.end_update();
}

}  // namespace lockstep::distribute
