#pragma once
// run_rule: expand_rule (lockstep/keras/optimizers/elementwise_rule.h) built for each ISA level and
// chosen once per rule, under the ISA cap — LOCKSTEP_DISPATCHED (core/cpu_dispatch.h) for a rule
// type, which the macro cannot take. Every build gives the same bits (see cpu_dispatch.h).
#include "core/cpu_dispatch.h"
#include "lockstep/keras/optimizers/elementwise_rule.h"

namespace lockstep::keras::optimizers::detail {

#if defined(__x86_64__)
template <typename Rule>
void expand_rule_x86_64(const Rule& rule, const UpdateSpan& s) {
  expand_rule<4>(rule, s);
}
template <typename Rule>
LOCKSTEP_TARGET_X86_64_V3 void expand_rule_x86_64_v3(const Rule& rule, const UpdateSpan& s) {
  expand_rule<8>(rule, s);
}
template <typename Rule>
LOCKSTEP_TARGET_X86_64_V4 void expand_rule_x86_64_v4(const Rule& rule, const UpdateSpan& s) {
  expand_rule<16>(rule, s);
}

template <typename Rule>
void run_rule(const Rule& rule, const UpdateSpan& s) {
  using Fn = void (*)(const Rule&, const UpdateSpan&);
  static const Fn chosen = ::lockstep::detail::choose_loop<Fn>(
      expand_rule_x86_64<Rule>, expand_rule_x86_64_v3<Rule>, expand_rule_x86_64_v4<Rule>);
  chosen(rule, s);
}

#else  // one build, the architecture's baseline (see cpu_dispatch.h)

template <typename Rule>
void run_rule(const Rule& rule, const UpdateSpan& s) {
  expand_rule(rule, s);
}

#endif

}  // namespace lockstep::keras::optimizers::detail
