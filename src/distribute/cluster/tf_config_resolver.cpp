#include "local_devices.h"

#include <nlohmann/json.hpp>

#include "lockstep/core/check.h"
#include "lockstep/core/error.h"
#include "lockstep/distribute/cluster_resolver.h"

namespace lockstep {
namespace {

using nlohmann::json;

[[noreturn]] void bad_tf_config(const std::string& what, const std::string& received) {
  throw InvalidArgument("TF_CONFIG: " + what + ". Received: " + received +
                        ". Expected e.g. {\"cluster\": {\"worker\": [\"host0:2222\", "
                        "\"host1:2222\"]}, \"task\": {\"type\": \"worker\", \"index\": 0}}.");
}

// The received value, shortened so a huge TF_CONFIG does not flood the message.
std::string shown(const json& value) {
  std::string text = value.dump();
  if (text.size() > 200) text = text.substr(0, 200) + "...";
  return text;
}

}  // namespace

TFConfigClusterResolver::TFConfigClusterResolver(const Environment& env, LocalDeviceOptions devices)
    : TFConfigClusterResolver(
          [&] {
            auto text = env.get("TF_CONFIG");
            LOCKSTEP_CHECK_AS(NotFound, text && !text->empty(),
                              "TF_CONFIG is not set. Set it to the cluster's JSON description on "
                              "every worker, or use resolve_cluster() to fall back to the local "
                              "host.");
            return *text;
          }(),
          env, std::move(devices)) {}

TFConfigClusterResolver TFConfigClusterResolver::from_string(const std::string& tf_config,
                                                             LocalDeviceOptions devices,
                                                             const Environment& env) {
  return TFConfigClusterResolver(tf_config, env, std::move(devices));
}

TFConfigClusterResolver::TFConfigClusterResolver(const std::string& tf_config,
                                                 const Environment& env,
                                                 LocalDeviceOptions devices) {
  json config;
  try {
    config = json::parse(tf_config);
  } catch (const json::parse_error& error) {
    std::string text = tf_config.size() > 200 ? tf_config.substr(0, 200) + "..." : tf_config;
    bad_tf_config(std::string("not valid JSON (") + error.what() + ")", "'" + text + "'");
  }
  if (!config.is_object()) bad_tf_config("expected a JSON object", shown(config));

  if (!config.contains("cluster")) bad_tf_config("missing field \"cluster\"", shown(config));
  const json& cluster = config["cluster"];
  if (!cluster.is_object() || cluster.empty()) {
    bad_tf_config("\"cluster\" must be a non-empty object of job name -> list of \"host:port\"",
                  "cluster=" + shown(cluster));
  }
  for (const auto& [job, tasks] : cluster.items()) {
    LOCKSTEP_CHECK(job != "ps",
                   "TF_CONFIG: job \"ps\" (parameter servers) is not supported: Lockstep trains "
                   "synchronously with all-reduce. Remove \"ps\" and list every training process "
                   "under \"worker\" (and optionally one \"chief\"). Received: cluster=",
                   shown(cluster), ".");
    if (!tasks.is_array() || tasks.empty()) {
      bad_tf_config("cluster." + job + " must be a non-empty list of \"host:port\" strings",
                    "cluster." + job + "=" + shown(tasks));
    }
    std::vector<std::string> addresses;
    for (const json& address : tasks) {
      if (!address.is_string() || address.get<std::string>().empty()) {
        bad_tf_config("cluster." + job + " must contain only non-empty \"host:port\" strings",
                      "cluster." + job + "=" + shown(tasks));
      }
      addresses.push_back(address.get<std::string>());
    }
    spec_.jobs[job] = std::move(addresses);
  }

  if (!config.contains("task")) bad_tf_config("missing field \"task\"", shown(config));
  const json& task = config["task"];
  if (!task.is_object()) bad_tf_config("\"task\" must be an object", "task=" + shown(task));
  if (!task.contains("type") || !task["type"].is_string()) {
    bad_tf_config("task.type must be a string naming a job of \"cluster\"", "task=" + shown(task));
  }
  task_type_ = task["type"].get<std::string>();
  if (!spec_.jobs.contains(task_type_)) {
    bad_tf_config("task.type \"" + task_type_ + "\" is not a job of \"cluster\"",
                  "cluster=" + shown(cluster));
  }
  if (!task.contains("index") || !task["index"].is_number_integer()) {
    bad_tf_config("task.index must be an integer", "task=" + shown(task));
  }
  const long long index = task["index"].get<long long>();
  const int num_tasks = spec_.num_tasks(task_type_);
  if (index < 0 || index >= num_tasks) {
    bad_tf_config("task.index must be in [0, " + std::to_string(num_tasks) + ") for job \"" +
                      task_type_ + "\"",
                  "task.index=" + std::to_string(index));
  }
  task_id_ = static_cast<int>(index);

  if (config.contains("rpc_layer")) {
    if (!config["rpc_layer"].is_string()) {
      bad_tf_config("rpc_layer must be a string", "rpc_layer=" + shown(config["rpc_layer"]));
    }
    rpc_layer_ = config["rpc_layer"].get<std::string>();
  }

  devices_ = cluster_internal::make_local_devices(cluster_internal::worker_cores(devices), devices,
                                                  env, task_type_, task_id_);
}

ClusterSpec TFConfigClusterResolver::cluster_spec() const {
  return spec_;
}

std::string TFConfigClusterResolver::master() const {
  const std::string& address = spec_.jobs.at(task_type_).at(task_id_);
  return rpc_layer_.empty() ? address : rpc_layer_ + "://" + address;
}

std::string TFConfigClusterResolver::task_type() const {
  return task_type_;
}
int TFConfigClusterResolver::task_id() const {
  return task_id_;
}
int TFConfigClusterResolver::num_accelerators() const {
  return static_cast<int>(devices_.size());
}
std::vector<DeviceSpec> TFConfigClusterResolver::local_devices() const {
  return devices_;
}
std::string TFConfigClusterResolver::rpc_layer() const {
  return rpc_layer_;
}

}  // namespace lockstep
