// A model of the seed step (Dense 784-128 relu, Dense 128-10, softmax cross-entropy, Adam; global
// batch 256) on two threads, written by hand outside Lockstep's engine and split two ways:
//
//   data    — as Lockstep splits it: each thread a replica of 128 examples and the whole model;
//             each writes its gradient, then each updates half of the first kernel from both
//             replicas' gradients (out of place into the next buffers, the float32 weights
//             streamed), and both read all of the weights in the next forward pass. Two barriers.
//   columns — each thread owns half of the hidden units (64 columns of the first kernel, 64 rows
//             of the second) for all 256 examples: it gathers and rescales the whole batch itself,
//             the two halves' partial logits are summed after one barrier, and each thread's
//             gradients and update (in place) touch only its own half. What crosses cores is
//             2 x 10 KB of partial logits.
//
// What it answers (docs/performance.md, "Where the step's time goes (Zen 5)"): how fast a step of
// the data split can be with no engine around it (no tape, tasks, backups or staging), and whether
// splitting the model instead of the batch takes the update's traffic between the cores away.
// Matmuls as Lockstep runs them: oneDNN's matmul primitive forward, weight gradients through
// dnnl_sgemm in float32 and the bfloat16 primitive (float32 out) with --bf16; the output layer in
// float32 on widened activations. The small loops are plain C++ built for the machine's ISA.
//
//   OMP_NUM_THREADS=1 build/release/bench/step_split_model [--steps N] [--rounds R] [--bf16]
//   [--pin]
//
// Each round runs both splits (the order alternating) and prints each one's mean microseconds a
// step after a warm-up, each thread's time per phase, and the loss of the last step: the two
// splits train the same model and round differently, so their losses agree to about 1e-5 in
// float32 and 1% under --bf16 (the labels are learnable: the loss falls from 2.3 to about 0.25
// in 3,000 steps). The median ratio closes. SPLIT_SAME_ROWS=1 reuses the first batch (no input
// work), SPLIT_NO_UPDATE=1 skips the first kernel's update, SPLIT_IN_PLACE=1 updates the data
// split in place (as no backup could run), SPLIT_NO_STREAM=1 stores its float32 weights without
// streaming; under --bf16, SPLIT_BF16_GRAD=1 keeps the first kernel's gradients in bfloat16 and
// SPLIT_FUSED=1 is its baseline (below). SPLIT_LATE_DW1=1 (float32, with SPLIT_IN_PLACE=1) races
// the data split against itself with the first kernel's gradient moved into the update: each
// thread multiplies both replicas' rows of its half a block at a time and updates each block while
// it is hot, so no replica writes a whole gradient. Both threads flush subnormals, as Lockstep's
// do.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <omp.h>
#include <pthread.h>
#include <sched.h>

#include <dnnl.hpp>

#include "lockstep/core/denormals.h"
#include "lockstep/ops/cpu_kernels.h"

namespace {

// The small loops in the machine's widest vector ISA, as Lockstep's own loops are dispatched.
#if defined(__x86_64__)
#define SPLIT_ISA_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define SPLIT_ISA_CLONES
#endif

void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

constexpr int64_t kIn = 784, kHid = 128, kOut = 10, kGlobal = 256, kRows = 60000;
constexpr float kLr = 1e-3f, kB1 = 0.9f, kB2 = 0.999f, kEps = 1e-7f;

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

dnnl::engine& engine() {
  static dnnl::engine e = [] {
    (void)lockstep::ops::onednn_cpu_isa();
    return dnnl::engine(dnnl::engine::kind::cpu, 0);
  }();
  return e;
}

uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
float from_bf16(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// One matmul primitive bound to fixed buffers: src [m, k] (stored transposed when ta) times
// weights [k, n] (stored transposed when tb) into dst [m, n], leading dimensions as stored.
struct Matmul {
  dnnl::matmul prim;
  std::unordered_map<int, dnnl::memory> args;  // built once: the operands stay where they are
  Matmul(int64_t m, int64_t k, int64_t n, void* a, bool ta, dt at, void* b, bool tb, dt bt, void* c,
         dt ct) {
    dnnl::memory::desc sd({m, k}, at, ta ? tag::ba : tag::ab);
    dnnl::memory::desc wd({k, n}, bt, tb ? tag::ba : tag::ab);
    dnnl::memory::desc dd({m, n}, ct, tag::ab);
    prim = dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(sd, wd, dd), engine()));
    args = {{DNNL_ARG_SRC, dnnl::memory(sd, engine(), a)},
            {DNNL_ARG_WEIGHTS, dnnl::memory(wd, engine(), b)},
            {DNNL_ARG_DST, dnnl::memory(dd, engine(), c)}};
  }
  void run(dnnl::stream& s) { prim.execute(s, args); }
};

// A weight gradient aᵀ · b (a [k, m] and b [k, n] row-major, c [m, n]): float32 through oneDNN's
// sgemm as Lockstep computes it (the matmul primitive copies the transposed operand first),
// bfloat16 through the matmul primitive reading a through strides (as Lockstep's mixed_bfloat16
// does).
struct WeightGradient {
  int64_t m, k, n;
  void *a, *b;
  float* c;
  bool bf16;
  std::vector<Matmul> prim;
  WeightGradient(int64_t m_, int64_t k_, int64_t n_, void* a_, void* b_, float* c_, bool bf16_)
      : m(m_), k(k_), n(n_), a(a_), b(b_), c(c_), bf16(bf16_) {
    if (bf16) prim.emplace_back(m, k, n, a, true, dt::bf16, b, false, dt::bf16, c, dt::f32);
  }
  void run(dnnl::stream& s) {
    if (bf16) return prim[0].run(s);
    dnnl_sgemm('T', 'N', m, n, k, 1.0f, static_cast<const float*>(a), m,
               static_cast<const float*>(b), n, 0.0f, c, n);
  }
};

// Sense-reversing spin barrier for the two threads.
class Barrier {
 public:
  void wait(int& sense) {
    sense ^= 1;
    if (count_.fetch_add(1, std::memory_order_acq_rel) == 1) {
      count_.store(0, std::memory_order_relaxed);
      flag_.store(sense, std::memory_order_release);
    } else {
      while (flag_.load(std::memory_order_acquire) != sense) cpu_relax();
    }
  }

 private:
  alignas(64) std::atomic<int> count_{0};
  alignas(64) std::atomic<int> flag_{0};
};

// Zeroed, 64-byte aligned arrays that live until the run's arena goes.
class Arena {
 public:
  Arena() = default;
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  ~Arena() {
    for (void* p : blocks_) std::free(p);
  }
  template <typename T>
  T* alloc(int64_t n) {
    const auto bytes = static_cast<size_t>((n * static_cast<int64_t>(sizeof(T)) + 63) / 64 * 64);
    void* p = std::aligned_alloc(64, bytes);
    if (p == nullptr) throw std::bad_alloc();
    std::memset(p, 0, bytes);
    blocks_.push_back(p);
    return static_cast<T*>(p);
  }

 private:
  std::vector<void*> blocks_;
};

// ---- the small loops ----------------------------------------------------------------------------

// Rows `idx` of the uint8 images times 1/255 into x [n, 784], float32 or bfloat16.
SPLIT_ISA_CLONES void gather_rescale(const uint8_t* images, const int32_t* idx, int64_t n,
                                     float* xf, uint16_t* xb) {
  for (int64_t r = 0; r < n; ++r) {
    if (r + 4 < n) {  // the rows are random: their misses overlap only when asked for ahead
      const uint8_t* ahead = images + static_cast<int64_t>(idx[r + 4]) * kIn;
      for (int64_t b = 0; b < kIn; b += 64) __builtin_prefetch(ahead + b);
    }
    const uint8_t* src = images + static_cast<int64_t>(idx[r]) * kIn;
    if (xf != nullptr) {
      float* dst = xf + r * kIn;
      for (int64_t i = 0; i < kIn; ++i) dst[i] = static_cast<float>(src[i]) * (1.0f / 255.0f);
    } else {
      uint16_t* dst = xb + r * kIn;
      for (int64_t i = 0; i < kIn; ++i) {
        const float f = static_cast<float>(src[i]) * (1.0f / 255.0f);
        uint32_t u;
        std::memcpy(&u, &f, 4);
        dst[i] = static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
      }
    }
  }
}

// z [m, n] (leading dimension n) += bias, relu; the activation kept as float32 (hf) or bfloat16
// (hb).
SPLIT_ISA_CLONES void bias_relu(const float* z, const float* bias, int64_t m, int64_t n, float* hf,
                                uint16_t* hb) {
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t c = 0; c < n; ++c) {
      const float v = std::max(z[r * n + c] + bias[c], 0.0f);
      if (hf != nullptr) hf[r * n + c] = v;
      if (hb != nullptr) {
        uint32_t u;
        std::memcpy(&u, &v, 4);
        hb[r * n + c] = static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
      }
    }
  }
}

// dl = (softmax(logits) - onehot) / 256 over m rows; returns the rows' summed loss.
double softmax_ce_grad(const float* logits, const int32_t* labels, int64_t m, float* dl) {
  double loss = 0;
  for (int64_t r = 0; r < m; ++r) {
    const float* l = logits + r * kOut;
    float mx = l[0];
    for (int c = 1; c < kOut; ++c) mx = std::max(mx, l[c]);
    float e[kOut], s = 0;
    for (int c = 0; c < kOut; ++c) s += e[c] = std::exp(l[c] - mx);
    for (int c = 0; c < kOut; ++c)
      dl[r * kOut + c] = (e[c] / s - (c == labels[r] ? 1.0f : 0.0f)) / static_cast<float>(kGlobal);
    loss += std::log(s) + mx - l[labels[r]];
  }
  return loss;
}

// dz = dh * (h > 0) (float32 h or bfloat16 h), into float32 or bfloat16, and the bias gradient.
SPLIT_ISA_CLONES void relu_grad(const float* dh, const float* hf, const uint16_t* hb, int64_t m,
                                int64_t n, float* dzf, uint16_t* dzb, float* db) {
  for (int64_t c = 0; c < n; ++c) db[c] = 0;
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t c = 0; c < n; ++c) {
      const float h = hf != nullptr ? hf[r * n + c] : from_bf16(hb[r * n + c]);
      const float d = h > 0.0f ? dh[r * n + c] : 0.0f;
      db[c] += d;
      if (dzf != nullptr) dzf[r * n + c] = d;
      if (dzb != nullptr) dzb[r * n + c] = to_bf16(d);
    }
  }
}

// Adam's rule for element i: new moments into m2, v2, the new weight returned.
[[gnu::always_inline]] inline float adam_element(float g, const float* w, const float* m,
                                                 const float* v, float* m2, float* v2, int64_t i,
                                                 float lr_t) {
  const float mi = kB1 * m[i] + (1 - kB1) * g;
  const float vi = kB2 * v[i] + (1 - kB2) * g * g;
  m2[i] = mi;
  v2[i] = vi;
  return w[i] - lr_t * mi / (std::sqrt(vi) + kEps);
}

// Adam on [lo, hi): g = g0 (+ g1), moments and weights from (m, v, w) into (m2, v2, w2) — the same
// arrays for an update in place (each element is read before it is written: no dependence between
// iterations, which ivdep tells the vectorizer); the bfloat16 copy when wb is given.
SPLIT_ISA_CLONES void adam(const float* g0, const float* g1, const float* w, const float* m,
                           const float* v, float* w2, float* m2, float* v2, uint16_t* wb,
                           int64_t lo, int64_t hi, float lr_t) {
  if (g1 == nullptr) g1 = g0;
  const float g1_scale = g1 == g0 ? 0.0f : 1.0f;
#pragma GCC ivdep
  for (int64_t i = lo; i < hi; ++i) {
    w2[i] = adam_element(g0[i] + g1_scale * g1[i], w, m, v, m2, v2, i, lr_t);
  }
  if (wb != nullptr) {
    for (int64_t i = lo; i < hi; ++i) wb[i] = to_bf16(w2[i]);
  }
}

// Adam with the bfloat16 copy in the same loop, the two replicas' gradients float32 or bfloat16.
inline float widen(uint16_t b) {
  return from_bf16(b);
}
inline float widen(float f) {
  return f;
}
template <typename G>
SPLIT_ISA_CLONES void adam_fused_copy(const G* g0, const G* g1, const float* w, const float* m,
                                      const float* v, float* w2, float* m2, float* v2, uint16_t* wb,
                                      int64_t lo, int64_t hi, float lr_t) {
#pragma GCC ivdep
  for (int64_t i = lo; i < hi; ++i) {
    const float wi = adam_element(widen(g0[i]) + widen(g1[i]), w, m, v, m2, v2, i, lr_t);
    w2[i] = wi;
    wb[i] = to_bf16(wi);
  }
}

// Whole 64-byte lines of dst stored with non-temporal stores (to memory, taking no line from the
// other core first), as Lockstep's update streams the weights; the ragged ends stored normally.
void stream_copy(const float* src, float* dst, int64_t lo, int64_t hi) {
  int64_t i = lo;
#if defined(__x86_64__)
  while (i < hi && (reinterpret_cast<uintptr_t>(dst + i) & 63) != 0) dst[i] = src[i], ++i;
  for (; i + 16 <= hi; i += 16) {
    const __m128i* s = reinterpret_cast<const __m128i*>(src + i);
    __m128i* d = reinterpret_cast<__m128i*>(dst + i);
    for (int q = 0; q < 4; ++q) _mm_stream_si128(d + q, _mm_loadu_si128(s + q));
  }
  _mm_sfence();
#endif
  for (; i < hi; ++i) dst[i] = src[i];
}

// ---- the model ----------------------------------------------------------------------------------

// Random images whose label is the largest of ten fixed random projections: a task the model can
// learn, so that the loss falls and the two splits' losses check that both train the same model.
struct Data {
  std::vector<uint8_t> images;
  std::vector<int32_t> labels;
  Data() : images(static_cast<size_t>(kRows * kIn)), labels(static_cast<size_t>(kRows)) {
    std::mt19937 rng(7);
    for (auto& p : images) p = static_cast<uint8_t>(rng() & 0xff);
    std::normal_distribution<float> normal;
    std::vector<float> proj(static_cast<size_t>(kIn * kOut));
    for (auto& w : proj) w = normal(rng);
    for (int64_t r = 0; r < kRows; ++r) {
      float score[kOut] = {};
      for (int64_t i = 0; i < kIn; ++i)
        for (int64_t c = 0; c < kOut; ++c)
          score[c] += static_cast<float>(images[static_cast<size_t>(r * kIn + i)]) *
                      proj[static_cast<size_t>(i * kOut + c)];
      labels[static_cast<size_t>(r)] =
          static_cast<int32_t>(std::max_element(score, score + kOut) - score);
    }
  }
};

struct Init {
  std::vector<float> w1, w2;  // [784, 128], [128, 10]
  Init() : w1(static_cast<size_t>(kIn * kHid)), w2(static_cast<size_t>(kHid * kOut)) {
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> u1(-0.08f, 0.08f), u2(-0.2f, 0.2f);
    for (auto& w : w1) w = u1(rng);
    for (auto& w : w2) w = u2(rng);
  }
};

struct Options {
  int steps = 3000, rounds = 6;
  bool bf16 = false, pin = false;
};

// Parts left out or changed, to weigh them: SPLIT_SAME_ROWS=1 gathers the input once and reuses it,
// SPLIT_NO_UPDATE=1 skips the first kernel's Adam update.
const bool same_rows = std::getenv("SPLIT_SAME_ROWS") != nullptr;
const bool no_update = std::getenv("SPLIT_NO_UPDATE") != nullptr;
// Under --bf16: SPLIT_BF16_GRAD=1 writes each replica's first-kernel gradient in bfloat16 (as Keras
// and PyTorch's autocast round it: the gradient of the bfloat16 copy), which the update widens as
// it sums the two; SPLIT_FUSED=1 keeps the float32 gradients but writes the bfloat16 copy in the
// update's loop, as SPLIT_BF16_GRAD does (the fair baseline for it).
const bool bf16_grad = std::getenv("SPLIT_BF16_GRAD") != nullptr;
const bool fused_copy = std::getenv("SPLIT_FUSED") != nullptr;
// The data split's update: SPLIT_IN_PLACE=1 in place (one buffer, as no backup could then run),
// SPLIT_NO_STREAM=1 the float32 weights with ordinary stores.
const bool in_place = std::getenv("SPLIT_IN_PLACE") != nullptr;
const bool no_stream = std::getenv("SPLIT_NO_STREAM") != nullptr;

void pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

// The batches of a run: a fresh permutation of the rows each epoch, the same for both splits.
std::vector<int32_t> batch_indices(int steps) {
  std::vector<int32_t> idx;
  std::mt19937 rng(3);
  std::vector<int32_t> perm(static_cast<size_t>(kRows));
  const int64_t per_epoch = kRows / kGlobal;
  for (int64_t s = 0; s < steps; ++s) {
    if (s % per_epoch == 0) {
      for (int32_t i = 0; i < kRows; ++i) perm[static_cast<size_t>(i)] = i;
      std::shuffle(perm.begin(), perm.end(), rng);
    }
    const auto b = perm.begin() + (s % per_epoch) * kGlobal;
    idx.insert(idx.end(), b, b + kGlobal);
  }
  return idx;
}

// The labels of the rows `idx[0..n)`.
void gather_labels(const Data& d, const int32_t* idx, int64_t n, int32_t* out) {
  for (int64_t r = 0; r < n; ++r) out[r] = d.labels[static_cast<size_t>(idx[r])];
}

float adam_lr(int step) {
  const double t = step + 1;
  return static_cast<float>(kLr * std::sqrt(1 - std::pow(kB2, t)) / (1 - std::pow(kB1, t)));
}

// Where each thread's step goes: time between marks, summed over the timed steps.
struct Phases {
  static constexpr int kMax = 8;
  const char* names[kMax] = {};
  double seconds[kMax] = {};
  int count = 0;
  std::chrono::steady_clock::time_point last;
  bool on = false;
  void start() { last = std::chrono::steady_clock::now(); }
  void mark(int i, const char* name) {
    const auto now = std::chrono::steady_clock::now();
    if (on) {
      seconds[i] += std::chrono::duration<double>(now - last).count();
      names[i] = name;
      count = std::max(count, i + 1);
    }
    last = now;
  }
};

struct Result {
  double us_per_step;
  double last_loss;
  Phases phases[2];
};

// Runs `body(thread, step)` on two threads for the steps; thread 0's wall time a step.
Result run_two(const Options& o, const std::function<double(int, int, Phases&)>& body) {
  double loss[2] = {0, 0};
  double seconds = 0;
  Result result{};
  auto thread_main = [&](int t) {
    // As Lockstep's replicas run (lockstep/core/denormals.h): Adam's moments of never-lit pixels
    // decay into subnormals, which cost x86 cores a microcode assist per vector instruction.
    lockstep::ScopedFlushDenormal flush;
    omp_set_num_threads(1);
    if (o.pin) pin_to(t);
    const int warm = std::min(200, o.steps / 4);
    std::chrono::steady_clock::time_point t0;
    Phases& ph = result.phases[t];
    for (int s = 0; s < o.steps; ++s) {
      if (s == warm) t0 = std::chrono::steady_clock::now(), ph.on = true;
      ph.start();
      loss[t] = body(t, s, ph);
    }
    for (int i = 0; i < ph.count; ++i) ph.seconds[i] /= o.steps - warm;
    if (t == 0)
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
                (o.steps - warm);
  };
  std::thread helper(thread_main, 1);
  thread_main(0);
  helper.join();
  result.us_per_step = seconds * 1e6;
  result.last_loss = (loss[0] + loss[1]) / kGlobal;
  return result;
}

// One thread's activations and their gradients for `rows` examples and `units` hidden units; the
// input and the first layer's activations and gradients in bfloat16 under --bf16.
struct Activations {
  int32_t* labels;
  float *xf, *z, *hf, *logits, *dl, *dh, *dzf;
  uint16_t *xb, *hb, *dzb;
  void allocate(Arena& arena, int64_t rows, int64_t units, bool bf16) {
    auto f = [&](int64_t n) { return arena.alloc<float>(n); };
    auto b = [&](int64_t n) { return arena.alloc<uint16_t>(n); };
    labels = arena.alloc<int32_t>(rows);
    xf = bf16 ? nullptr : f(rows * kIn);
    xb = bf16 ? b(rows * kIn) : nullptr;
    z = f(rows * units), hf = f(rows * units);
    hb = bf16 ? b(rows * units) : nullptr;
    logits = f(rows * kOut), dl = f(rows * kOut);
    dh = f(rows * units);
    dzf = bf16 ? nullptr : f(rows * units);
    dzb = bf16 ? b(rows * units) : nullptr;
  }
  void* x() const { return xb != nullptr ? static_cast<void*>(xb) : xf; }
  void* dz() const { return dzb != nullptr ? static_cast<void*>(dzb) : dzf; }
};

Result run_data_split(const Options& o, const Data& d, const Init& init,
                      const std::vector<int32_t>& idx, bool late_dw1 = false) {
  const int64_t n1 = kIn * kHid, n2 = kHid * kOut, per = kGlobal / 2;
  const dt a = o.bf16 ? dt::bf16 : dt::f32;
  Arena arena;
  auto alloc_f = [&](int64_t n) { return arena.alloc<float>(n); };
  auto alloc_b = [&](int64_t n) { return arena.alloc<uint16_t>(n); };
  // Shared: weights and moments double-buffered (the update writes the next ones), the bfloat16
  // copy, each replica's gradient slot.
  float *w1[2], *m1[2], *v1[2];
  for (int b = 0; b < 2; ++b) w1[b] = alloc_f(n1), m1[b] = alloc_f(n1), v1[b] = alloc_f(n1);
  std::copy(init.w1.begin(), init.w1.end(), w1[0]);
  uint16_t* w1b = alloc_b(n1);
  for (int64_t i = 0; i < n1; ++i) w1b[i] = to_bf16(w1[0][i]);
  float *w2 = alloc_f(n2), *m2 = alloc_f(n2), *v2 = alloc_f(n2);
  std::copy(init.w2.begin(), init.w2.end(), w2);
  float *b1 = alloc_f(kHid), *mb1 = alloc_f(kHid), *vb1 = alloc_f(kHid);
  float *b2 = alloc_f(kOut), *mb2 = alloc_f(kOut), *vb2 = alloc_f(kOut);
  float *g1[2], *g2[2], *gb1[2], *gb2[2];
  uint16_t* g1b[2];
  for (int t = 0; t < 2; ++t)
    g1b[t] = alloc_b(n1), g1[t] = alloc_f(n1), g2[t] = alloc_f(n2), gb1[t] = alloc_f(kHid),
    gb2[t] = alloc_f(kOut);

  struct Local : Activations {
    std::vector<Matmul> fwd1, fwd1_next, out, dh_mm;
    std::vector<WeightGradient> dw2, dw1;
    dnnl::stream stream{engine()};
  };
  Local loc[2];
  for (int t = 0; t < 2; ++t) {
    Local& l = loc[t];
    l.allocate(arena, per, kHid, o.bf16);
    void* x = l.x();
    void* dz = l.dz();
    for (int b = 0; b < 2; ++b) {
      void* w = o.bf16 ? static_cast<void*>(w1b) : w1[b];
      (b == 0 ? l.fwd1 : l.fwd1_next)
          .emplace_back(per, kIn, kHid, x, false, a, w, false, a, l.z, dt::f32);
    }
    // The output layer in float32 (as the seed model's under mixed_bfloat16: its activations
    // widened).
    l.out.emplace_back(per, kHid, kOut, l.hf, false, dt::f32, w2, false, dt::f32, l.logits,
                       dt::f32);
    l.dw2.emplace_back(kHid, per, kOut, l.hf, l.dl, g2[t], false);
    l.dh_mm.emplace_back(per, kOut, kHid, l.dl, false, dt::f32, w2, true, dt::f32, l.dh, dt::f32);
    l.dw1.emplace_back(kIn, per, kHid, x, dz, g1[t], o.bf16);
    if (bf16_grad && o.bf16) {
      l.dw1.back().prim.clear();
      l.dw1.back().prim.emplace_back(kIn, per, kHid, x, true, dt::bf16, dz, false, dt::bf16,
                                     static_cast<void*>(g1b[t]), dt::bf16);
    }
  }
  Barrier barrier;
  int sense[2] = {0, 0};
  const int64_t half = (kIn / 2) * kHid;

  return run_two(o, [&](int t, int s, Phases& ph) {
    Local& l = loc[t];
    const int cur = in_place ? 0 : s & 1, nxt = in_place ? 0 : cur ^ 1;
    const int32_t* rows = idx.data() + s * kGlobal + t * per;
    if (!same_rows || s == 0) gather_rescale(d.images.data(), rows, per, l.xf, l.xb);
    gather_labels(d, rows, per, l.labels);
    ph.mark(0, "input");
    (cur == 0 ? l.fwd1 : l.fwd1_next)[0].run(l.stream);
    bias_relu(l.z, b1, per, kHid, o.bf16 ? nullptr : l.hf, l.hb);
    if (o.bf16)  // the output layer multiplies the bfloat16 activations, widened
      for (int64_t i = 0; i < per * kHid; ++i) l.hf[i] = from_bf16(l.hb[i]);
    l.out[0].run(l.stream);
    for (int64_t r = 0; r < per; ++r)
      for (int c = 0; c < kOut; ++c) l.logits[r * kOut + c] += b2[c];
    const double loss = softmax_ce_grad(l.logits, l.labels, per, l.dl);
    ph.mark(1, "forward");
    l.dw2[0].run(l.stream);
    for (int c = 0; c < kOut; ++c) {
      float sum = 0;
      for (int64_t r = 0; r < per; ++r) sum += l.dl[r * kOut + c];
      gb2[t][c] = sum;
    }
    l.dh_mm[0].run(l.stream);
    relu_grad(l.dh, o.bf16 ? nullptr : l.hf, l.hb, per, kHid, l.dzf, l.dzb, gb1[t]);
    if (!late_dw1) l.dw1[0].run(l.stream);
    ph.mark(2, "backward");
    barrier.wait(sense[t]);
    ph.mark(3, "wait");
    const float lr_t = adam_lr(s);
    if (late_dw1) {
      // Each thread computes both replicas' gradients of its half of the first kernel's rows, a
      // block at a time, and updates the block while it is in L1/L2 (in place).
      constexpr int64_t kBlock = 56;
      static thread_local std::vector<float> ga(kBlock * kHid), gb(kBlock * kHid);
      const int64_t r0 = t == 0 ? 0 : kIn / 2, r1 = t == 0 ? kIn / 2 : kIn;
      for (int64_t r = r0; r < r1; r += kBlock) {
        const int64_t rows_b = std::min(kBlock, r1 - r);
        dnnl_sgemm('T', 'N', rows_b, kHid, per, 1.0f, loc[0].xf + r, kIn, loc[0].dzf, kHid, 0.0f,
                   ga.data(), kHid);
        dnnl_sgemm('T', 'N', rows_b, kHid, per, 1.0f, loc[1].xf + r, kIn, loc[1].dzf, kHid, 0.0f,
                   gb.data(), kHid);
        const int64_t off = r * kHid;
        if (!no_update)
          adam(ga.data(), gb.data(), w1[0] + off, m1[0] + off, v1[0] + off, w1[0] + off,
               m1[0] + off, v1[0] + off, nullptr, 0, rows_b * kHid, lr_t);
      }
    }
    // Each thread updates half of the first kernel; thread 0 the small variables too.
    const int64_t lo = t == 0 ? 0 : half, hi = t == 0 ? half : n1;
    if (no_update || late_dw1) {
    } else if (o.bf16 && fused_copy) {
      adam_fused_copy(g1[0], g1[1], w1[cur], m1[cur], v1[cur], w1[nxt], m1[nxt], v1[nxt], w1b, lo,
                      hi, lr_t);
    } else if (o.bf16 && bf16_grad) {
      adam_fused_copy(g1b[0], g1b[1], w1[cur], m1[cur], v1[cur], w1[nxt], m1[nxt], v1[nxt], w1b, lo,
                      hi, lr_t);
    } else if (o.bf16 || no_stream) {
      adam(g1[0], g1[1], w1[cur], m1[cur], v1[cur], w1[nxt], m1[nxt], v1[nxt],
           o.bf16 ? w1b : nullptr, lo, hi, lr_t);
    } else {
      // Through scratch a slice at a time, as Lockstep's update streams the next weights.
      constexpr int64_t kSlice = 2048;
      static thread_local std::vector<float> scratch(kSlice);
      for (int64_t i = lo; i < hi; i += kSlice) {
        const int64_t e = std::min(hi, i + kSlice);
        adam(g1[0] + i, g1[1] + i, w1[cur] + i, m1[cur] + i, v1[cur] + i, scratch.data(),
             m1[nxt] + i, v1[nxt] + i, nullptr, 0, e - i, lr_t);
        stream_copy(scratch.data(), w1[nxt] + i, 0, e - i);
      }
    }
    if (t == 0) {
      adam(g2[0], g2[1], w2, m2, v2, w2, m2, v2, nullptr, 0, n2, lr_t);
      adam(gb2[0], gb2[1], b2, mb2, vb2, b2, mb2, vb2, nullptr, 0, kOut, lr_t);
    } else {
      adam(gb1[0], gb1[1], b1, mb1, vb1, b1, mb1, vb1, nullptr, 0, kHid, lr_t);
    }
    ph.mark(4, "update");
    barrier.wait(sense[t]);
    ph.mark(5, "wait");
    return loss;
  });
}

Result run_column_split(const Options& o, const Data& d, const Init& init,
                        const std::vector<int32_t>& idx) {
  constexpr int64_t kHalf = kHid / 2;
  const int64_t n1 = kIn * kHalf, n2 = kHalf * kOut;
  const dt a = o.bf16 ? dt::bf16 : dt::f32;
  Arena arena;
  auto alloc_f = [&](int64_t n) { return arena.alloc<float>(n); };
  auto alloc_b = [&](int64_t n) { return arena.alloc<uint16_t>(n); };
  float* partial[2][2];  // [step parity][thread]: the half's logits [256, 10]
  for (auto& p : partial)
    for (auto& q : p) q = alloc_f(kGlobal * kOut);

  // Each thread keeps its own copy of the output bias (both have the whole batch's dl, so both
  // apply the same update to it).
  struct Local : Activations {
    float *w1, *m1, *v1, *g1, *b1, *mb1, *vb1, *gb1, *w2, *m2, *v2, *g2, *b2, *mb2, *vb2, *gb2;
    uint16_t* w1b;
    std::vector<Matmul> fwd1, out, dh_mm;
    std::vector<WeightGradient> dw2, dw1;
    dnnl::stream stream{engine()};
  };
  Local loc[2];
  for (int t = 0; t < 2; ++t) {
    Local& l = loc[t];
    l.w1 = alloc_f(n1), l.m1 = alloc_f(n1), l.v1 = alloc_f(n1), l.g1 = alloc_f(n1);
    l.w1b = alloc_b(n1);
    for (int64_t k = 0; k < kIn; ++k)
      for (int64_t c = 0; c < kHalf; ++c) {
        l.w1[k * kHalf + c] = init.w1[static_cast<size_t>(k * kHid + t * kHalf + c)];
        l.w1b[k * kHalf + c] = to_bf16(l.w1[k * kHalf + c]);
      }
    l.b1 = alloc_f(kHalf), l.mb1 = alloc_f(kHalf), l.vb1 = alloc_f(kHalf);
    l.gb1 = alloc_f(kHalf);
    l.w2 = alloc_f(n2), l.m2 = alloc_f(n2), l.v2 = alloc_f(n2), l.g2 = alloc_f(n2);
    std::copy(init.w2.begin() + t * n2, init.w2.begin() + (t + 1) * n2, l.w2);
    l.b2 = alloc_f(kOut), l.mb2 = alloc_f(kOut), l.vb2 = alloc_f(kOut), l.gb2 = alloc_f(kOut);
    l.allocate(arena, kGlobal, kHalf, o.bf16);
    void* x = l.x();
    void* w = o.bf16 ? static_cast<void*>(l.w1b) : l.w1;
    void* dz = l.dz();
    l.fwd1.emplace_back(kGlobal, kIn, kHalf, x, false, a, w, false, a, l.z, dt::f32);
    for (int p = 0; p < 2; ++p)
      l.out.emplace_back(kGlobal, kHalf, kOut, l.hf, false, dt::f32, l.w2, false, dt::f32,
                         partial[p][t], dt::f32);
    l.dw2.emplace_back(kHalf, kGlobal, kOut, l.hf, l.dl, l.g2, false);
    l.dh_mm.emplace_back(kGlobal, kOut, kHalf, l.dl, false, dt::f32, l.w2, true, dt::f32, l.dh,
                         dt::f32);
    l.dw1.emplace_back(kIn, kGlobal, kHalf, x, dz, l.g1, o.bf16);
  }
  Barrier barrier;
  int sense[2] = {0, 0};

  return run_two(o, [&](int t, int s, Phases& ph) {
    Local& l = loc[t];
    const int p = s & 1;
    const int32_t* rows = idx.data() + s * kGlobal;
    if (!same_rows || s == 0) gather_rescale(d.images.data(), rows, kGlobal, l.xf, l.xb);
    gather_labels(d, rows, kGlobal, l.labels);
    ph.mark(0, "input");
    l.fwd1[0].run(l.stream);
    bias_relu(l.z, l.b1, kGlobal, kHalf, o.bf16 ? nullptr : l.hf, l.hb);
    if (o.bf16)
      for (int64_t i = 0; i < kGlobal * kHalf; ++i) l.hf[i] = from_bf16(l.hb[i]);
    l.out[static_cast<size_t>(p)].run(l.stream);
    ph.mark(1, "forward");
    barrier.wait(sense[t]);
    ph.mark(2, "wait");
    for (int64_t i = 0; i < kGlobal * kOut; ++i)
      l.logits[i] = partial[p][0][i] + partial[p][1][i] + l.b2[i % kOut];
    // Both threads compute the whole batch's loss; each reports half of it.
    const double loss = 0.5 * softmax_ce_grad(l.logits, l.labels, kGlobal, l.dl);
    l.dw2[0].run(l.stream);
    l.dh_mm[0].run(l.stream);
    relu_grad(l.dh, o.bf16 ? nullptr : l.hf, l.hb, kGlobal, kHalf, l.dzf, l.dzb, l.gb1);
    l.dw1[0].run(l.stream);
    ph.mark(3, "loss, backward");
    const float lr_t = adam_lr(s);
    if (!no_update)
      adam(l.g1, nullptr, l.w1, l.m1, l.v1, l.w1, l.m1, l.v1, o.bf16 ? l.w1b : nullptr, 0, n1,
           lr_t);
    adam(l.g2, nullptr, l.w2, l.m2, l.v2, l.w2, l.m2, l.v2, nullptr, 0, n2, lr_t);
    adam(l.gb1, nullptr, l.b1, l.mb1, l.vb1, l.b1, l.mb1, l.vb1, nullptr, 0, kHalf, lr_t);
    for (int c = 0; c < kOut; ++c) {
      float sum = 0;
      for (int64_t r = 0; r < kGlobal; ++r) sum += l.dl[r * kOut + c];
      l.gb2[c] = sum;
    }
    adam(l.gb2, nullptr, l.b2, l.mb2, l.vb2, l.b2, l.mb2, l.vb2, nullptr, 0, kOut, lr_t);
    ph.mark(4, "update");
    return loss;
  });
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--steps" && i + 1 < argc) {
      o.steps = std::atoi(argv[++i]);
    } else if (arg == "--rounds" && i + 1 < argc) {
      o.rounds = std::atoi(argv[++i]);
    } else if (arg == "--bf16") {
      o.bf16 = true;
    } else if (arg == "--pin") {
      o.pin = true;
    } else {
      std::fprintf(stderr, "usage: %s [--steps N] [--rounds R] [--bf16] [--pin]\n", argv[0]);
      return 2;
    }
  }
  if (o.steps < 8 || o.rounds < 1) {
    std::fprintf(stderr, "--steps must be at least 8 and --rounds at least 1\n");
    return 2;
  }
  const Data data;
  const Init init;
  const auto idx = batch_indices(o.steps);
  std::printf("%s, %d steps a run, %s threads\n", o.bf16 ? "bfloat16 first layer" : "float32",
              o.steps, o.pin ? "pinned" : "unpinned");
  std::vector<double> ratios;
  // SPLIT_LATE_DW1=1 (float32): the second contestant is the data split with the first kernel's
  // gradient computed in the update, both replicas' rows of a block by the thread updating it.
  const bool late = std::getenv("SPLIT_LATE_DW1") != nullptr;
  if (late && (o.bf16 || !in_place)) {
    std::fprintf(stderr, "SPLIT_LATE_DW1 runs float32 in place: set SPLIT_IN_PLACE=1, no --bf16\n");
    return 2;
  }
  auto second = [&] {
    return late ? run_data_split(o, data, init, idx, true) : run_column_split(o, data, init, idx);
  };
  for (int r = 0; r < o.rounds; ++r) {
    Result ds{}, cs{};
    if (r % 2 == 0) {
      ds = run_data_split(o, data, init, idx);
      cs = second();
    } else {
      cs = second();
      ds = run_data_split(o, data, init, idx);
    }
    ratios.push_back(ds.us_per_step / cs.us_per_step);
    std::printf("round %d: data split %.1f us/step (loss %.5f), %s %.1f us/step (loss %.5f)\n",
                r + 1, ds.us_per_step, ds.last_loss, late ? "late dW1" : "column split",
                cs.us_per_step, cs.last_loss);
    for (const Result* res : {&ds, &cs}) {
      std::printf("  %s:", res == &ds ? "data  " : late ? "late  " : "column");
      for (int t = 0; t < 2; ++t) {
        const Phases& ph = res->phases[t];
        std::printf(" [thread %d", t);
        for (int i = 0; i < ph.count; ++i)
          std::printf(" %s %.1f", ph.names[i], ph.seconds[i] * 1e6);
        std::printf("]");
      }
      std::printf("\n");
    }
  }
  std::sort(ratios.begin(), ratios.end());
  std::printf("median data/%s: %.3fx\n", late ? "late" : "column", ratios[ratios.size() / 2]);
  return 0;
}
