// MpiCommunicator, when a collective does not complete: which peers stopped answering (asked on
// the control communicator, mpi_diagnosis.h), what this host's kernel says about the local ones,
// and the error every later collective rethrows.
#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <map>

#include "lockstep/core/error.h"
#include "mpi_communicator.h"
#include "mpi_diagnosis.h"
#include "seconds_text.h"

namespace lockstep::distribute {
namespace {

// What the kernel says about a process of this host that does not answer: /proc/<pid>/stat's
// state letter tells a stopped process (SIGSTOP, job control, a debugger) from a busy one.
std::string local_process_fate(int pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return "it has exited (no such process)";
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  // The state follows the command name, which is in parentheses and may itself contain ") ".
  const size_t close = line.rfind(')');
  const char state = close != std::string::npos && close + 2 < line.size() ? line[close + 2] : '?';
  switch (state) {
    case 'T':
    case 't':
      return "it is stopped (process state " + std::string(1, state) +
             ": SIGSTOP, job control or a debugger)";
    case 'Z':
      return "it has exited (a zombie not yet reaped)";
    case 'D':
      return "it is blocked in the kernel (process state D: uninterruptible I/O)";
    default:
      return "it is still running but not communicating (stalled: a long computation, a "
             "deadlock, or a different collective)";
  }
}

}  // namespace

// "world rank 1 (pid 1234 on host node-a) stopped answering: it did not join all_reduce #57 ...
// within 10 s; it is stopped (...)", one clause per lost worker; when every worker of another host
// is lost, one clause naming the host.
std::string MpiCommunicator::describe_lost(const std::vector<char>& answered) const {
  const double timeout = options().timeout_seconds;
  const std::string joined =
      "did not join " + describe_current() +
      (timeout > 0 ? " within " + detail::seconds_text(timeout) + " s" : std::string());
  auto who = [&](int p) {
    const Peer& peer = peers_[static_cast<size_t>(p)];
    return "world rank " + std::to_string(peer.world_rank) + " (pid " + std::to_string(peer.pid) +
           " on host " + peer.host + ")";
  };
  // Hosts in the order of their first lost worker; for each, its workers and how many are lost.
  std::vector<std::string> order;
  std::map<std::string, std::pair<std::vector<int>, int>> by_host;  // lost ranks, all workers
  for (int p = 0; p < size_; ++p) {
    const std::string& host = peers_[static_cast<size_t>(p)].host;
    auto& entry = by_host[host];
    ++entry.second;
    if (answered[static_cast<size_t>(p)]) continue;
    if (entry.first.empty()) order.push_back(host);
    entry.first.push_back(p);
  }
  const std::string& my_host = peers_[static_cast<size_t>(rank_)].host;
  std::string text;
  for (const std::string& host : order) {
    const auto& [lost, workers] = by_host[host];
    if (!text.empty()) text += "; ";
    if (host != my_host && static_cast<int>(lost.size()) == workers) {
      text += "host " + host + " is unreachable or down: none of its workers answered (";
      for (size_t i = 0; i < lost.size(); ++i) text += (i ? ", " : "") + who(lost[i]);
      text += lost.size() == 1 ? "; it " : "; they ";
      text += joined + ")";
      continue;
    }
    for (size_t i = 0; i < lost.size(); ++i) {
      if (i) text += "; ";
      text += who(lost[i]) + " stopped answering: it " + joined + "; ";
      text += host == my_host ? local_process_fate(peers_[static_cast<size_t>(lost[i])].pid)
                              : "it is on another host (exited, stopped or hung)";
    }
  }
  return text;
}

// Diagnoses a collective that did not complete: asks every peer, on the control communicator,
// which collective it is in; peers that do not answer within a grace period are reported lost.
void MpiCommunicator::fail(const std::string& cause) {
  detail::mark_job_failed();
  const double timeout = options().timeout_seconds;
  const double grace = std::clamp(0.1 * timeout, 0.5, 2.0);
  const std::string what = describe_current();
  const std::vector<char> answered =
      detail::ask_peers(control_, rank_, sequence(), grace, *responder_);
  std::vector<int> survivors;
  int n_lost = 0;
  for (int p = 0; p < size_; ++p) {
    if (!answered[static_cast<size_t>(p)])
      ++n_lost;
    else if (p != rank_)
      survivors.push_back(p);
  }
  const std::string prefix =
      "world rank " + std::to_string(peers_[static_cast<size_t>(rank_)].world_rank) + ": ";
  if (n_lost > 0) {
    error_ = describe_lost(answered) + (cause.empty() ? "" : " (" + cause + ")") +
             ". Seen from world rank " +
             std::to_string(peers_[static_cast<size_t>(rank_)].world_rank) + ".";
    error_is_deadline_ = false;
    detail::record_job_failure(Unavailable(error_).what(), control_, rank_, std::move(survivors),
                               sequence(), grace);
  } else if (!cause.empty()) {
    error_ = prefix + what + " failed: " + cause + "; every peer still answers.";
    error_is_deadline_ = false;
  } else {
    error_ = prefix + what + " did not complete within " + detail::seconds_text(timeout) +
             " s (CommunicationOptions::timeout_seconds), although every peer is alive and " +
             "waiting in a collective; a rank may have called a different collective.";
    error_is_deadline_ = true;
  }
  broken_ = true;
  check_usable();
  throw Internal("unreachable");
}

}  // namespace lockstep::distribute
