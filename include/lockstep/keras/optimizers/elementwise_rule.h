#pragma once
// An optimizer's rule, stated once for one element, and the loops that run it over a span of a
// variable. A rule is a trivially copyable struct holding the step's constants, with
//
//   static constexpr size_t kSlots;   // per-element state, in slot_names() order (Adam: m, v)
//   float operator()(float w, float g, std::array<float, kSlots>& s) const;
//
// returning the element's new weight and leaving its new slot values in s. expand_rule runs the
// rule over the n elements of an UpdateSpan; the optimizer's update_step picks the rule and calls
// it (the built-in optimizers through a build chosen per ISA). The rule is inlined into every loop,
// so a loop makes no call per element, and the same rule gives the same bits in every loop.
#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "lockstep/core/bfloat16.h"
#include "lockstep/distribute/elementwise_update.h"

namespace lockstep::keras::optimizers {

// n elements of one variable: reads w, the gradient (g[i], or g[i] + g2[i] in float32 when g2 is
// set: two replicas' gradients summed as they are read; or, when gb is set instead of g, two
// replicas' bfloat16 gradients gb[i] + gb2[i], each widened first) and the slots; writes w_out,
// slots_out and, when rounded is set, the bfloat16 rounding of each new weight (as float32 or
// bfloat16). An output may be the very array of its input (an update in place) but overlaps no
// other array. The outputs `streamed` names go out with non-temporal stores where the loop's build
// has them (expand_rule); the caller fences.
struct UpdateSpan {
  const float* w = nullptr;
  const float* g = nullptr;
  const float* g2 = nullptr;
  std::span<const float* const> slots{};
  float* w_out = nullptr;
  std::span<float* const> slots_out{};
  distribute::RoundedOut rounded{};
  size_t n = 0;
  distribute::Streamed streamed{};
  const bfloat16* gb = nullptr;
  const bfloat16* gb2 = nullptr;
};

namespace detail {

// What rule_loop writes beside the new weights.
enum class Rounded { none, float32_values, bfloat16 };

// A bfloat16's float32 value (exact): its bits in the upper half.
[[gnu::always_inline]] inline float widened(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// The inputs and outputs of a span's elements, as rule_element reads and writes them.
template <size_t kSlots>
struct ElementArrays {
  const float* w;
  const float* g;
  const float* g2;
  const uint16_t* gb;
  const uint16_t* gb2;
  std::array<const float*, kSlots> in;
  std::array<float*, kSlots> out;
  float* w_out;

  explicit ElementArrays(const UpdateSpan& s)
      : w(s.w),
        g(s.g),
        g2(s.g2),
        gb(reinterpret_cast<const uint16_t*>(s.gb)),
        gb2(reinterpret_cast<const uint16_t*>(s.gb2)),
        in{},
        out{},
        w_out(s.w_out) {
    for (size_t k = 0; k < kSlots; ++k) {
      in[k] = s.slots[k];
      out[k] = s.slots_out[k];
    }
  }
};

// The rule on element i: reads its gradient (kBf16: a.gb[i] + a.gb2[i], widened, kSum then
// ignored; else a.g[i], plus a.g2[i] when kSum), its weight and slots, writes its new slots and
// weight, and returns the new weight.
template <bool kSum, bool kBf16, typename Rule>
[[gnu::always_inline]] inline float rule_element(const Rule& rule,
                                                 const ElementArrays<Rule::kSlots>& a, size_t i) {
  std::array<float, Rule::kSlots> slot;
  for (size_t k = 0; k < Rule::kSlots; ++k) slot[k] = a.in[k][i];
  float gi;
  if constexpr (kBf16) {
    gi = widened(a.gb[i]) + widened(a.gb2[i]);
  } else {
    gi = a.g[i];
    if constexpr (kSum) gi += a.g2[i];
  }
  const float wi = rule(a.w[i], gi, slot);
  for (size_t k = 0; k < Rule::kSlots; ++k) a.out[k][i] = slot[k];
  a.w_out[i] = wi;
  return wi;
}

// The upper half of the rounded float: bfloat16(w)'s bits, NaN included, branch-free.
[[gnu::always_inline]] inline uint16_t bfloat16_bits(float w) {
  uint32_t u;
  const float r = round_to_bfloat16_value(w);
  std::memcpy(&u, &r, sizeof u);
  return static_cast<uint16_t>(u >> 16);
}

template <bool kSum, Rounded kRounded, typename Rule, bool kBf16 = false>
[[gnu::always_inline]] inline void rule_loop(const Rule& rule, const UpdateSpan& s) {
  const ElementArrays<Rule::kSlots> a(s);
  float* rounded = s.rounded.values;
  uint16_t* rounded_bits = reinterpret_cast<uint16_t*>(s.rounded.bf16);
  const size_t n = s.n;
  // Element i reads only index i of its inputs before writing index i of its outputs: no
  // dependence crosses iterations, even in place, so the loop needs no alias checks.
#if defined(__clang__)
#pragma clang loop vectorize(assume_safety)
#elif defined(__GNUC__)
#pragma GCC ivdep
#endif
  for (size_t i = 0; i < n; ++i) {
    const float wi = rule_element<kSum, kBf16>(rule, a, i);
    if constexpr (kRounded == Rounded::float32_values) rounded[i] = round_to_bfloat16_value(wi);
    if constexpr (kRounded == Rounded::bfloat16) rounded_bits[i] = bfloat16_bits(wi);
  }
}

// n floats from src to dst with non-temporal stores of kLanes floats (one register of the build
// that inlines it: 4 SSE2, 8 AVX, 16 AVX-512), or with memcpy where dst is not aligned to one, n
// is not a multiple of one, or kLanes is 0 (no such stores: not x86-64). The stores are inline
// assembly: GCC has no generic non-temporal store, and an intrinsic would not inline into a
// template every build shares; the assembler's operand is only ever given a register of the
// build's width.
#if defined(__x86_64__)
typedef float StreamVector4 __attribute__((vector_size(16)));
typedef float StreamVector8 __attribute__((vector_size(32)));
typedef float StreamVector16 __attribute__((vector_size(64)));
#endif

template <int kLanes>
[[gnu::always_inline]] inline void stream_floats(float* dst, const float* src, size_t n) {
#if defined(__x86_64__)
  if constexpr (kLanes == 4 || kLanes == 8 || kLanes == 16) {
    constexpr size_t kBytes = 4 * kLanes;
    if (reinterpret_cast<uintptr_t>(dst) % kBytes == 0 && n % kLanes == 0) {
      for (size_t i = 0; i < n; i += kLanes) {
        if constexpr (kLanes == 16) {
          StreamVector16 v;
          std::memcpy(&v, src + i, sizeof v);
          asm("vmovntps %1, %0" : "=m"(*reinterpret_cast<StreamVector16*>(dst + i)) : "v"(v));
        } else if constexpr (kLanes == 8) {
          StreamVector8 v;
          std::memcpy(&v, src + i, sizeof v);
          asm("vmovntps %1, %0" : "=m"(*reinterpret_cast<StreamVector8*>(dst + i)) : "x"(v));
        } else {
          StreamVector4 v;
          std::memcpy(&v, src + i, sizeof v);
          asm("movntps %1, %0" : "=m"(*reinterpret_cast<StreamVector4*>(dst + i)) : "x"(v));
        }
      }
      return;
    }
  }
#endif
  std::memcpy(dst, src, n * sizeof(float));
}

// rule_loop with the outputs s.streamed names written around the caches: the rule runs over
// blocks small enough to stay in L1, into a block buffer, and each block goes out with
// non-temporal stores right away. Streaming straight from the loop's registers is not something
// GCC's vectoriser emits; through a larger buffer the copies wait on L2 and the stores bunch
// up behind them. The rule's arithmetic is rule_loop's, so the bits are the same.
template <bool kSum, Rounded kRounded, int kLanes, typename Rule, bool kBf16 = false>
[[gnu::always_inline]] inline void rule_loop_streamed(const Rule& rule, const UpdateSpan& s) {
  constexpr size_t kSlots = Rule::kSlots;
  constexpr size_t kBlock = 64;  // 256 bytes an array: four cache lines
  alignas(64) float w_block[kBlock];
  alignas(64) float slot_block[kSlots > 0 ? kSlots : 1][kBlock];
  // The rounded copy's block: kBlock floats, or kBlock bfloat16 in its first half.
  alignas(64) float rounded_block[kBlock];
  std::array<const float*, kSlots> slot_in{};
  std::array<float*, kSlots> slot_out{};
  UpdateSpan part = s;
  part.slots = std::span<const float* const>(slot_in.data(), kSlots);
  part.slots_out = std::span<float* const>(slot_out.data(), kSlots);
  part.streamed = {};
  for (size_t b = 0; b < s.n; b += kBlock) {
    const size_t m = std::min(kBlock, s.n - b);
    part.w = s.w + b;
    if constexpr (kBf16) {
      part.gb = s.gb + b;
      part.gb2 = s.gb2 + b;
    } else {
      part.g = s.g + b;
      if constexpr (kSum) part.g2 = s.g2 + b;
    }
    part.w_out = s.streamed.weights ? w_block : s.w_out + b;
    for (size_t k = 0; k < kSlots; ++k) {
      slot_in[k] = s.slots[k] + b;
      slot_out[k] = s.streamed.slots ? slot_block[k] : s.slots_out[k] + b;
    }
    part.rounded = s.rounded.at(b);
    if constexpr (kRounded == Rounded::float32_values) {
      if (s.streamed.rounded) part.rounded.values = rounded_block;
    }
    if constexpr (kRounded == Rounded::bfloat16) {
      if (s.streamed.rounded) part.rounded.bf16 = reinterpret_cast<bfloat16*>(rounded_block);
    }
    part.n = m;
    rule_loop<kSum, kRounded, Rule, kBf16>(rule, part);
    if (s.streamed.weights) stream_floats<kLanes>(s.w_out + b, w_block, m);
    if constexpr (kRounded == Rounded::float32_values) {
      if (s.streamed.rounded) stream_floats<kLanes>(s.rounded.values + b, rounded_block, m);
    }
    if constexpr (kRounded == Rounded::bfloat16) {
      // Two bfloat16 a float; an odd tail goes out ordinarily.
      if (s.streamed.rounded) {
        stream_floats<kLanes>(reinterpret_cast<float*>(s.rounded.bf16 + b), rounded_block, m / 2);
        if (m % 2 != 0) {
          std::memcpy(s.rounded.bf16 + b + m - 1,
                      reinterpret_cast<const bfloat16*>(rounded_block) + m - 1, sizeof(bfloat16));
        }
      }
    }
    if (s.streamed.slots) {
      for (size_t k = 0; k < kSlots; ++k)
        stream_floats<kLanes>(s.slots_out[k] + b, slot_block[k], m);
    }
  }
}

// The elements [from, from + n) of s, their rounding (bfloat16) into `rounded` (or nowhere:
// nullptr), every other output where s has it; `in` and `out` hold the slots' pointers the part
// refers to.
template <size_t kSlots>
[[gnu::always_inline]] inline UpdateSpan span_part(const UpdateSpan& s, size_t from, size_t n,
                                                   uint16_t* rounded,
                                                   std::array<const float*, kSlots>& in,
                                                   std::array<float*, kSlots>& out) {
  UpdateSpan p = s;
  p.w = s.w + from;
  if (s.g != nullptr) p.g = s.g + from;
  if (s.g2 != nullptr) p.g2 = s.g2 + from;
  if (s.gb != nullptr) p.gb = s.gb + from;
  if (s.gb2 != nullptr) p.gb2 = s.gb2 + from;
  p.w_out = s.w_out + from;
  for (size_t k = 0; k < kSlots; ++k) {
    in[k] = s.slots[k] + from;
    out[k] = s.slots_out[k] + from;
  }
  p.slots = std::span<const float* const>(in.data(), kSlots);
  p.slots_out = std::span<float* const>(out.data(), kSlots);
  p.rounded = {.bf16 = reinterpret_cast<bfloat16*>(rounded)};
  p.n = n;
  p.streamed = {};
  return p;
}

// store_row_pair with non-temporal stores where the build has them (stream_floats): each run of
// a tile's row goes through an L1 buffer of whole words, a pair of roundings each.
template <int kLanes>
[[gnu::always_inline]] inline void stream_row_pair(const PairedRowsLayout& layout, uint16_t* dst,
                                                   int64_t k, int64_t n, const uint16_t* a,
                                                   const uint16_t* b, int64_t count) {
  if constexpr (kLanes == 0 || std::endian::native != std::endian::little) {
    store_row_pair(layout, dst, k, n, a, b, count);
  } else {
    constexpr int64_t kWords = 64;
    alignas(64) uint32_t words[kWords];
    while (count > 0) {
      const int64_t in_tile = layout.col_block - (n & (layout.col_block - 1));
      const int64_t run = std::min({count, in_tile, kWords});
      for (int64_t j = 0; j < run; ++j) words[j] = row_pair_word(a[j], b[j]);
      stream_floats<kLanes>(reinterpret_cast<float*>(dst + layout.offset(k, n)),
                            reinterpret_cast<const float*>(words), static_cast<size_t>(run));
      a += run;
      b += run;
      n += run;
      count -= run;
    }
  }
}

// rule_loop for a bfloat16 copy laid out for a matmul's kernel (RoundedOut::layout: pairs of
// rows interleaved). The pairs of rows s holds whole go through rule_loop as the plain copy's
// loop reads them — each row's part one long contiguous span (both rows at once where they fit
// the buffer), in memory order, which the hardware's prefetchers follow — their roundings into a
// buffer in L1, then interleaved into whole cache lines (store_row_pair); at s's ends, where a
// pair's other row belongs to another span (maybe another thread's), each rounding is a store of
// its own (store_paired_rows). The rule's arithmetic is rule_loop's, so the bits are the same. Of
// the outputs, only whole pairs of the rounding are streamed (s.streamed is a hint).
template <bool kSum, int kLanes, typename Rule, bool kBf16 = false>
[[gnu::always_inline]] inline void rule_loop_paired(const Rule& rule, const UpdateSpan& s) {
  constexpr size_t kSlots = Rule::kSlots;
  constexpr size_t kBlock = 64;
  const PairedRowsLayout& layout = *s.rounded.layout;
  auto* dst = reinterpret_cast<uint16_t*>(s.rounded.bf16);
  const size_t cols = static_cast<size_t>(layout.cols), begin = s.rounded.offset;
  // The roundings of a whole pair's two rows (up to kSlab columns of each), in L1.
  constexpr size_t kSlab = 256;
  alignas(64) uint16_t a[kBlock], r[2 * kSlab];
  std::array<const float*, kSlots> in{};
  std::array<float*, kSlots> out{};
  // (No lambda here: its body would be a function of its own, built for the baseline ISA.)
  const size_t pair = 2 * cols;
  // Whole pairs' lines go around the caches when the caller asks (s.streamed.rounded): the other
  // CPU's matmul reads them next, and an ordinary store would first take back each line it read.
  const bool stream = kLanes > 0 && s.streamed.rounded;
  const size_t head = std::min(s.n, (pair - begin % pair) % pair);
  size_t e = 0;
  // The head and the tail a block at a time, each rounding stored on its own.
  for (; e < head; e += kBlock) {
    const size_t m = std::min(kBlock, head - e);
    rule_loop<kSum, Rounded::bfloat16, Rule, kBf16>(rule, span_part(s, e, m, a, in, out));
    store_paired_rows<kLanes>(layout, dst, static_cast<int64_t>(begin + e), a,
                              static_cast<int64_t>(m));
  }
  e = head;
  for (; e + pair <= s.n; e += pair) {
    const auto k = static_cast<int64_t>((begin + e) / cols);
    for (size_t c = 0; c < cols; c += kSlab) {
      const size_t w = std::min(kSlab, cols - c);
      uint16_t* rb = r + w;  // the second row's roundings
      if (w == cols) {
        // The pair's two rows are one contiguous span.
        rule_loop<kSum, Rounded::bfloat16, Rule, kBf16>(rule, span_part(s, e, pair, r, in, out));
      } else {
        rule_loop<kSum, Rounded::bfloat16, Rule, kBf16>(rule, span_part(s, e + c, w, r, in, out));
        rule_loop<kSum, Rounded::bfloat16, Rule, kBf16>(rule,
                                                        span_part(s, e + cols + c, w, rb, in, out));
      }
      const auto n = static_cast<int64_t>(c), count = static_cast<int64_t>(w);
      if (stream) {
        stream_row_pair<kLanes>(layout, dst, k, n, r, rb, count);
      } else {
        store_row_pair(layout, dst, k, n, r, rb, count);
      }
    }
  }
  for (; e < s.n; e += kBlock) {
    const size_t m = std::min(kBlock, s.n - e);
    rule_loop<kSum, Rounded::bfloat16, Rule, kBf16>(rule, span_part(s, e, m, a, in, out));
    store_paired_rows<kLanes>(layout, dst, static_cast<int64_t>(begin + e), a,
                              static_cast<int64_t>(m));
  }
}

template <bool kSum, Rounded kRounded, int kLanes, typename Rule, bool kBf16 = false>
[[gnu::always_inline]] inline void rule_loop_stored(const Rule& rule, const UpdateSpan& s) {
  if constexpr (kRounded == Rounded::bfloat16) {
    if (s.rounded.layout != nullptr) return rule_loop_paired<kSum, kLanes, Rule, kBf16>(rule, s);
  }
  if (kLanes > 0 && s.streamed)
    return rule_loop_streamed<kSum, kRounded, kLanes, Rule, kBf16>(rule, s);
  rule_loop<kSum, kRounded, Rule, kBf16>(rule, s);
}

}  // namespace detail

// The rule over every element of s: one loop per (summed gradient, rounded copy) combination, so
// that no element tests either. kStoreLanes: the floats of one non-temporal store in the build
// that inlines it (detail::stream_floats), 0 to store every output ordinarily (s.streamed is a
// hint).
template <int kStoreLanes = 0, typename Rule>
[[gnu::always_inline]] inline void expand_rule(const Rule& rule, const UpdateSpan& s) {
  using detail::Rounded;
  using detail::rule_loop_stored;
  if (s.gb != nullptr) {
    if (s.rounded.values != nullptr)
      return rule_loop_stored<true, Rounded::float32_values, kStoreLanes, Rule, true>(rule, s);
    if (s.rounded.bf16 != nullptr)
      return rule_loop_stored<true, Rounded::bfloat16, kStoreLanes, Rule, true>(rule, s);
    return rule_loop_stored<true, Rounded::none, kStoreLanes, Rule, true>(rule, s);
  }
  if (s.g2 == nullptr) {
    if (s.rounded.values != nullptr)
      return rule_loop_stored<false, Rounded::float32_values, kStoreLanes>(rule, s);
    if (s.rounded.bf16 != nullptr)
      return rule_loop_stored<false, Rounded::bfloat16, kStoreLanes>(rule, s);
    return rule_loop_stored<false, Rounded::none, kStoreLanes>(rule, s);
  }
  if (s.rounded.values != nullptr)
    return rule_loop_stored<true, Rounded::float32_values, kStoreLanes>(rule, s);
  if (s.rounded.bf16 != nullptr)
    return rule_loop_stored<true, Rounded::bfloat16, kStoreLanes>(rule, s);
  rule_loop_stored<true, Rounded::none, kStoreLanes>(rule, s);
}

}  // namespace lockstep::keras::optimizers
