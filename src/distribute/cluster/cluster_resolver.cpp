#include "lockstep/distribute/cluster_resolver.h"

#include <algorithm>
#include <cstdlib>
#include <nlohmann/json.hpp>

namespace lockstep {

Environment Environment::process() {
  return Environment();
}

Environment Environment::fixed(std::map<std::string, std::string> variables) {
  Environment env;
  env.variables_ = std::move(variables);
  return env;
}

std::optional<std::string> Environment::get(const std::string& name) const {
  if (variables_) {
    auto it = variables_->find(name);
    if (it == variables_->end()) return std::nullopt;
    return it->second;
  }
  const char* value = std::getenv(name.c_str());
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

int ClusterSpec::num_tasks(const std::string& job) const {
  auto it = jobs.find(job);
  return it == jobs.end() ? 0 : static_cast<int>(it->second.size());
}

nlohmann::json ClusterSpec::to_json() const {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [job, tasks] : jobs) out[job] = tasks;
  return out;
}

ClusterResolver::~ClusterResolver() = default;

std::string ClusterResolver::master() const {
  return "";
}
std::string ClusterResolver::task_type() const {
  return "worker";
}
int ClusterResolver::task_id() const {
  return 0;
}
std::string ClusterResolver::rpc_layer() const {
  return "";
}

int ClusterResolver::num_workers() const {
  const ClusterSpec spec = cluster_spec();
  return std::max(1, spec.num_tasks("chief") + spec.num_tasks("worker"));
}

int ClusterResolver::worker_index() const {
  if (task_type() == "chief") return task_id();
  if (task_type() == "worker") return cluster_spec().num_tasks("chief") + task_id();
  return task_id();
}

}  // namespace lockstep
