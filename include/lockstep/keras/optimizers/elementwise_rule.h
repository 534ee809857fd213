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
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "lockstep/core/bfloat16.h"
#include "lockstep/distribute/elementwise_update.h"

namespace lockstep::keras::optimizers {

// n elements of one variable: reads w, the gradient (g[i], or g[i] + g2[i] in float32 when g2 is
// set: two replicas' gradients summed as they are read) and the slots; writes w_out, slots_out
// and, when rounded is set, the bfloat16 rounding of each new weight (as float32 or bfloat16). An
// output may be the very array of its input (an update in place) but overlaps no other array.
struct UpdateSpan {
  const float* w = nullptr;
  const float* g = nullptr;
  const float* g2 = nullptr;
  std::span<const float* const> slots{};
  float* w_out = nullptr;
  std::span<float* const> slots_out{};
  distribute::RoundedOut rounded{};
  size_t n = 0;
};

namespace detail {

// What rule_loop writes beside the new weights.
enum class Rounded { none, float32_values, bfloat16 };

template <bool kSum, Rounded kRounded, typename Rule>
[[gnu::always_inline]] inline void rule_loop(const Rule& rule, const UpdateSpan& s) {
  constexpr size_t kSlots = Rule::kSlots;
  std::array<const float*, kSlots> in{};
  std::array<float*, kSlots> out{};
  for (size_t k = 0; k < kSlots; ++k) {
    in[k] = s.slots[k];
    out[k] = s.slots_out[k];
  }
  const float* w = s.w;
  const float* g = s.g;
  const float* g2 = s.g2;
  float* w_out = s.w_out;
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
    std::array<float, kSlots> slot;
    for (size_t k = 0; k < kSlots; ++k) slot[k] = in[k][i];
    float gi = g[i];
    if constexpr (kSum) gi += g2[i];
    const float wi = rule(w[i], gi, slot);
    for (size_t k = 0; k < kSlots; ++k) out[k][i] = slot[k];
    w_out[i] = wi;
    if constexpr (kRounded == Rounded::float32_values) rounded[i] = round_to_bfloat16_value(wi);
    if constexpr (kRounded == Rounded::bfloat16) {
      // The upper half of the rounded float: bfloat16(wi)'s bits, NaN included, branch-free.
      uint32_t u;
      const float r = round_to_bfloat16_value(wi);
      std::memcpy(&u, &r, sizeof u);
      rounded_bits[i] = static_cast<uint16_t>(u >> 16);
    }
  }
}

}  // namespace detail

// The rule over every element of s: one loop per (summed gradient, rounded copy) combination, so
// that no element tests either.
template <typename Rule>
[[gnu::always_inline]] inline void expand_rule(const Rule& rule, const UpdateSpan& s) {
  using detail::Rounded;
  if (s.g2 == nullptr) {
    if (s.rounded.values != nullptr)
      return detail::rule_loop<false, Rounded::float32_values>(rule, s);
    if (s.rounded.bf16 != nullptr) return detail::rule_loop<false, Rounded::bfloat16>(rule, s);
    return detail::rule_loop<false, Rounded::none>(rule, s);
  }
  if (s.rounded.values != nullptr) return detail::rule_loop<true, Rounded::float32_values>(rule, s);
  if (s.rounded.bf16 != nullptr) return detail::rule_loop<true, Rounded::bfloat16>(rule, s);
  detail::rule_loop<true, Rounded::none>(rule, s);
}

}  // namespace lockstep::keras::optimizers
