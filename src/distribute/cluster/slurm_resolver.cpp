#include <algorithm>
#include <cctype>
#include <numeric>
#include <sstream>

#include "local_devices.h"
#include "lockstep/core/check.h"
#include "lockstep/core/error.h"
#include "lockstep/distribute/cluster_resolver.h"

namespace lockstep {
namespace {

using cluster_internal::parse_env_int;

[[noreturn]] void bad_nodelist(const std::string& nodelist, const std::string& what) {
  throw InvalidArgument("SLURM node list: " + what + ". Received: \"" + nodelist +
                        "\". Expected host names with optional ranges, e.g. \"node[01-03],gpu7\".");
}

// Splits at commas outside brackets.
std::vector<std::string> split_top_level(const std::string& text, const std::string& whole) {
  std::vector<std::string> parts;
  std::string current;
  int depth = 0;
  for (char c : text) {
    if (c == '[') ++depth;
    if (c == ']' && --depth < 0) bad_nodelist(whole, "unbalanced ']'");
    if (c == ',' && depth == 0) {
      parts.push_back(current);
      current.clear();
    } else {
      current += c;
    }
  }
  if (depth != 0) bad_nodelist(whole, "unbalanced '['");
  parts.push_back(current);
  return parts;
}

bool all_digits(const std::string& text) {
  return !text.empty() && std::all_of(text.begin(), text.end(),
                                      [](unsigned char c) { return std::isdigit(c) != 0; });
}

// "01-03,7" -> {"01", "02", "03", "7"}; the width of a range's start is kept as zero padding.
std::vector<std::string> expand_ranges(const std::string& ranges, const std::string& whole) {
  std::vector<std::string> out;
  std::string item;
  std::istringstream in(ranges);
  while (std::getline(in, item, ',')) {
    const auto dash = item.find('-');
    const std::string first = item.substr(0, dash);
    const std::string last = dash == std::string::npos ? first : item.substr(dash + 1);
    if (!all_digits(first) || !all_digits(last)) bad_nodelist(whole, "bad range \"" + item + "\"");
    if (first.size() > 9 || last.size() > 9)
      bad_nodelist(whole, "range too large \"" + item + "\"");
    const long long lo = std::stoll(first), hi = std::stoll(last);
    if (lo > hi) bad_nodelist(whole, "range \"" + item + "\" runs backwards");
    if (hi - lo > 100000) bad_nodelist(whole, "range \"" + item + "\" has over 100000 hosts");
    for (long long n = lo; n <= hi; ++n) {
      std::string digits = std::to_string(n);
      if (digits.size() < first.size()) digits.insert(0, first.size() - digits.size(), '0');
      out.push_back(digits);
    }
  }
  if (ranges.empty() || ranges.back() == ',') bad_nodelist(whole, "empty range in \"[]\"");
  return out;
}

}  // namespace

std::vector<std::string> expand_slurm_nodelist(const std::string& nodelist) {
  std::vector<std::string> hosts;
  for (const std::string& pattern : split_top_level(nodelist, nodelist)) {
    if (pattern.empty()) bad_nodelist(nodelist, "empty host name");
    std::vector<std::string> expanded = {""};
    size_t pos = 0;
    while (pos < pattern.size()) {
      const size_t open = pattern.find('[', pos);
      const std::string literal = pattern.substr(pos, open - pos);
      for (std::string& host : expanded) host += literal;
      if (open == std::string::npos) break;
      const size_t close = pattern.find(']', open);
      std::vector<std::string> suffixes =
          expand_ranges(pattern.substr(open + 1, close - open - 1), nodelist);
      if (expanded.size() * suffixes.size() > static_cast<size_t>(cluster_internal::kMaxTasks)) {
        bad_nodelist(nodelist, "expands to more than " +
                                   std::to_string(cluster_internal::kMaxTasks) + " hosts");
      }
      std::vector<std::string> next;
      for (const std::string& host : expanded) {
        for (const std::string& suffix : suffixes) next.push_back(host + suffix);
      }
      expanded = std::move(next);
      pos = close + 1;
    }
    hosts.insert(hosts.end(), expanded.begin(), expanded.end());
    if (hosts.size() > static_cast<size_t>(cluster_internal::kMaxTasks)) {
      bad_nodelist(nodelist, "expands to more than " + std::to_string(cluster_internal::kMaxTasks) +
                                 " hosts");
    }
  }
  return hosts;
}

std::vector<int> expand_slurm_tasks_per_node(const std::string& tasks_per_node) {
  std::vector<int> counts;
  std::istringstream in(tasks_per_node);
  std::string item;
  const auto bad = [&] {
    throw InvalidArgument("SLURM_TASKS_PER_NODE: expected counts like \"2(x3),1\". Received: \"" +
                          tasks_per_node + "\".");
  };
  while (std::getline(in, item, ',')) {
    const auto paren = item.find('(');
    const std::string count = item.substr(0, paren);
    int repeat = 1;
    if (paren != std::string::npos) {
      if (item.size() < paren + 4 || item[paren + 1] != 'x' || item.back() != ')') bad();
      const std::string times = item.substr(paren + 2, item.size() - paren - 3);
      if (!all_digits(times) || times.size() > 6) bad();
      repeat = std::stoi(times);
    }
    if (!all_digits(count) || count.size() > 6 || repeat < 1) bad();
    if (counts.size() + repeat > static_cast<size_t>(cluster_internal::kMaxTasks)) bad();
    counts.insert(counts.end(), repeat, std::stoi(count));
  }
  if (counts.empty() || tasks_per_node.back() == ',') bad();
  return counts;
}

namespace {

std::string first_set(const Environment& env, std::initializer_list<const char*> names,
                      std::string* which) {
  for (const char* name : names) {
    if (auto value = env.get(name); value && !value->empty()) {
      *which = name;
      return *value;
    }
  }
  std::string list;
  for (const char* name : names) list += (list.empty() ? "" : " or ") + std::string(name);
  throw NotFound(list +
                 " is not set: this process was not started by srun inside a SLURM job. "
                 "Launch with `srun -n <tasks> ...`, or use resolve_cluster() to detect the "
                 "environment.");
}

}  // namespace

SlurmClusterResolver::SlurmClusterResolver(const Environment& env, LocalDeviceOptions devices,
                                           int port_base) {
  std::string name;
  // A job step (srun) may use part of the allocation: prefer its own variables.
  std::string value = first_set(env, {"SLURM_PROCID"}, &name);
  task_id_ = parse_env_int(name, value, 0);
  value = first_set(env, {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"}, &name);
  const int num_tasks = parse_env_int(name, value, 1);
  LOCKSTEP_CHECK(num_tasks <= cluster_internal::kMaxTasks, name, "=", value, " exceeds the ",
                 cluster_internal::kMaxTasks,
                 " tasks Lockstep supports; the environment looks corrupt.");
  std::string nodelist_name;
  const std::string nodelist = first_set(
      env, {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"}, &nodelist_name);
  std::vector<std::string> hosts;
  try {
    hosts = expand_slurm_nodelist(nodelist);
  } catch (const InvalidArgument& error) {
    throw InvalidArgument(nodelist_name + ": " + error.what());
  }

  LOCKSTEP_CHECK(task_id_ < num_tasks, "SLURM_PROCID=", task_id_, " is outside the ", num_tasks,
                 " task(s) of the step (", name, ").");

  std::vector<int> per_node;
  std::string tpn_name;
  if (auto tpn = env.get("SLURM_STEP_TASKS_PER_NODE"); tpn && !tpn->empty()) {
    per_node = expand_slurm_tasks_per_node(*tpn);
    tpn_name = "SLURM_STEP_TASKS_PER_NODE";
  } else if (auto job_tpn = env.get("SLURM_TASKS_PER_NODE"); job_tpn && !job_tpn->empty()) {
    per_node = expand_slurm_tasks_per_node(*job_tpn);
    tpn_name = "SLURM_TASKS_PER_NODE";
  } else {
    // Block distribution, as srun does by default: the first (tasks % nodes) nodes take one more.
    const int nodes = static_cast<int>(hosts.size());
    for (int n = 0; n < nodes; ++n) per_node.push_back(num_tasks / nodes + (n < num_tasks % nodes));
  }
  const long long tasks_on_nodes = std::accumulate(per_node.begin(), per_node.end(), 0LL);
  LOCKSTEP_CHECK(per_node.size() == hosts.size() && tasks_on_nodes == num_tasks,
                 "SLURM environment is inconsistent: ", nodelist_name, "=\"", nodelist, "\" has ",
                 hosts.size(), " node(s) and ", name, "=", num_tasks,
                 tpn_name.empty()
                     ? std::string()
                     : ", but " + tpn_name + " gives " + std::to_string(per_node.size()) +
                           " node(s) with " + std::to_string(tasks_on_nodes) + " task(s)",
                 ".");

  std::vector<std::string> addresses;
  int node_of_task = 0, local_of_task = 0;
  for (size_t n = 0; n < hosts.size(); ++n) {
    for (int local = 0; local < per_node[n]; ++local) {
      if (static_cast<int>(addresses.size()) == task_id_) {
        node_of_task = static_cast<int>(n);
        local_of_task = local;
      }
      addresses.push_back(hosts[n] + ":" + std::to_string(port_base + local));
    }
  }
  spec_.jobs["worker"] = std::move(addresses);

  const int local_size = per_node[node_of_task];
  int local_rank = local_of_task;
  if (auto local_id = env.get("SLURM_LOCALID"); local_id && !local_id->empty()) {
    local_rank = parse_env_int("SLURM_LOCALID", *local_id, 0);
    LOCKSTEP_CHECK(local_rank < local_size, "SLURM_LOCALID=", *local_id, " is outside the ",
                   local_size, " task(s) on this node.");
  }
  int cpus_per_task = 0;
  if (auto cpt = env.get("SLURM_CPUS_PER_TASK"); cpt && !cpt->empty()) {
    cpus_per_task = parse_env_int("SLURM_CPUS_PER_TASK", *cpt, 1);
  }
  division_ = cluster_internal::divide_cores(cluster_internal::worker_cores(devices), local_rank,
                                             local_size, cpus_per_task);
  devices_ =
      cluster_internal::make_local_devices(division_.cores, devices, env, "worker", task_id_);
}

ClusterSpec SlurmClusterResolver::cluster_spec() const {
  return spec_;
}
std::string SlurmClusterResolver::master() const {
  return spec_.jobs.at("worker").at(task_id_);
}
int SlurmClusterResolver::task_id() const {
  return task_id_;
}
int SlurmClusterResolver::num_accelerators() const {
  return static_cast<int>(devices_.size());
}
std::vector<DeviceSpec> SlurmClusterResolver::local_devices() const {
  return devices_;
}
std::string SlurmClusterResolver::rpc_layer() const {
  return "mpi";
}
CoreDivision SlurmClusterResolver::core_division() const {
  return division_;
}

}  // namespace lockstep
