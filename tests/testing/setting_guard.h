#pragma once
// Sets a process-wide setting (a getter and setter pair) for one test's scope and restores the
// previous value when the scope ends, so a test of one choice neither depends on the machine's
// default nor leaves its choice to the tests after it.

namespace lockstep::testing {

template <typename T>
class SettingGuard {
 public:
  SettingGuard(T (*get)(), void (*set)(T), T value) : set_(set), previous_(get()) { set_(value); }
  ~SettingGuard() { set_(previous_); }
  SettingGuard(const SettingGuard&) = delete;
  SettingGuard& operator=(const SettingGuard&) = delete;

 private:
  void (*set_)(T);
  T previous_;
};

}  // namespace lockstep::testing
