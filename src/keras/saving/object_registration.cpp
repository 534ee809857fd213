#include "lockstep/keras/saving/object_registration.h"

#include <map>
#include <mutex>
#include <set>

#include "builtins.h"
#include "lockstep/keras/layer.h"
#include "lockstep/keras/losses.h"
#include "lockstep/keras/metrics/metric.h"
#include "lockstep/keras/optimizers/optimizer.h"

namespace lockstep::keras::saving {

namespace {

template <typename Base>
struct Table {
  std::map<std::string, Factory<Base>> factories;
  std::set<std::string> builtins;
  std::map<std::string, std::string> registered_names;  // user class name -> "package>name"
};

std::recursive_mutex& registry_mutex() {
  static std::recursive_mutex mu;
  return mu;
}

// Set while the built-ins register, so that they are recorded as built-in.
bool registering_builtins = false;

template <typename Base>
Table<Base>& table() {
  static Table<Base> t;
  return t;
}

void ensure_builtins() {
  static std::once_flag once;
  std::call_once(once, [] {
    std::lock_guard lock(registry_mutex());
    registering_builtins = true;
    internal::register_builtin_layers();
    internal::register_builtin_objects();
    registering_builtins = false;
  });
}

}  // namespace

template <typename Base>
void register_object(const std::string& name, Factory<Base> factory) {
  std::lock_guard lock(registry_mutex());
  table<Base>().factories[name] = std::move(factory);
  if (registering_builtins) table<Base>().builtins.insert(name);
}

template <typename Base>
std::optional<Factory<Base>> get_registered_object(const std::string& name) {
  ensure_builtins();
  std::lock_guard lock(registry_mutex());
  const auto& f = table<Base>().factories;
  auto it = f.find(name);
  if (it == f.end()) return std::nullopt;
  return it->second;
}

template <typename Base>
bool is_builtin(const std::string& class_name) {
  ensure_builtins();
  std::lock_guard lock(registry_mutex());
  return table<Base>().builtins.count(class_name) > 0;
}

std::string registered_name(const std::string& package, const std::string& name) {
  return package + ">" + name;
}

template <typename Base>
void register_keras_serializable(const std::string& package, const std::string& name,
                                 Factory<Base> factory) {
  ensure_builtins();
  register_object<Base>(registered_name(package, name), factory);
  if (!is_builtin<Base>(name)) register_object<Base>(name, std::move(factory));
  std::lock_guard lock(registry_mutex());
  table<Base>().registered_names[name] = registered_name(package, name);
}

template <typename Base>
std::optional<std::string> get_registered_name(const std::string& class_name) {
  std::lock_guard lock(registry_mutex());
  const auto& names = table<Base>().registered_names;
  auto it = names.find(class_name);
  if (it == names.end()) return std::nullopt;
  return it->second;
}

#define LOCKSTEP_INSTANTIATE_REGISTRY(T)                                           \
  template void register_object<T>(const std::string&, Factory<T>);                \
  template std::optional<Factory<T>> get_registered_object<T>(const std::string&); \
  template bool is_builtin<T>(const std::string&);                                 \
  template std::optional<std::string> get_registered_name<T>(const std::string&);  \
  template void register_keras_serializable<T>(const std::string&, const std::string&, Factory<T>);

LOCKSTEP_INSTANTIATE_REGISTRY(Layer)
LOCKSTEP_INSTANTIATE_REGISTRY(losses::Loss)
LOCKSTEP_INSTANTIATE_REGISTRY(metrics::Metric)
LOCKSTEP_INSTANTIATE_REGISTRY(optimizers::Optimizer)
LOCKSTEP_INSTANTIATE_REGISTRY(optimizers::schedules::LearningRateSchedule)
#undef LOCKSTEP_INSTANTIATE_REGISTRY

}  // namespace lockstep::keras::saving
