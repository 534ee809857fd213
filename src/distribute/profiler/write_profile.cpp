#include <cstdint>
#include <filesystem>
#include <fstream>

#include "distribute/step/task_pool.h"
#include "lockstep/core/check.h"
#include "lockstep/core/error.h"
#include "lockstep/core/profiler.h"
#include "lockstep/distribute/profiler.h"
#include "lockstep/distribute/strategy.h"

namespace lockstep::distribute {

namespace {

void write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.flush();
  if (!out) {
    throw Unavailable("write_profile: cannot write '" + path.string() +
                      "'. Check that the directory is writable and the disk is not full.");
  }
}

}  // namespace

std::optional<ProfileSummary> write_profile(const std::string& dir, Strategy& strategy,
                                            const VerdictThresholds& thresholds) {
  LOCKSTEP_CHECK_AS(FailedPrecondition, !profiler::recording(),
                    "write_profile: the profiler is still recording; call profiler::stop() first "
                    "(on every worker).");
  LOCKSTEP_CHECK(!dir.empty(),
                 "write_profile: expected a directory for the profile. Received: \"\".");
  strategy.task_pool().wait_for_runs_before(UINT64_MAX);
  ProfileTrace trace = gather_trace(strategy.cross_worker());
  if (trace.workers.empty()) return std::nullopt;
  const std::filesystem::path root(dir);
  std::error_code ec;
  std::filesystem::create_directories(root, ec);
  if (ec || !std::filesystem::is_directory(root)) {
    throw Unavailable("write_profile: cannot create the directory '" + dir + "': " +
                      (ec ? ec.message() : std::string("a file of that name exists")) + ".");
  }
  ProfileSummary summary = summarize(trace, thresholds);
  write_file(root / "trace.json", trace_event_json(trace));
  write_file(root / "summary.txt", format_summary(summary));
  write_file(root / "steps.svg", step_breakdown_svg(summary));
  write_file(root / "report.html", html_report(summary));
  return summary;
}

}  // namespace lockstep::distribute
