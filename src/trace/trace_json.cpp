#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>

#include "lockstep/trace/trace.h"
#include "span_order.h"

namespace lockstep::trace {

namespace {

// Nanoseconds as microseconds with exactly three decimals: no rounding, so that a child's
// [ts, ts + dur] stays inside its parent's in the viewer.
void append_us(std::string& out, int64_t ns) {
  if (ns < 0) {
    out += '-';
    ns = -ns;
  }
  const int64_t whole = ns / 1000, frac = ns % 1000;
  out += std::to_string(whole);
  out += '.';
  if (frac < 100) out += '0';
  if (frac < 10) out += '0';
  out += std::to_string(frac);
}

std::string quoted(const std::string& s) {
  return nlohmann::json(s).dump();
}

void append_metadata(std::string& out, const char* name, int pid, int tid, const std::string& arg,
                     bool with_tid) {
  out += "{\"ph\":\"M\",\"name\":\"";
  out += name;
  out += "\",\"pid\":" + std::to_string(pid);
  if (with_tid) out += ",\"tid\":" + std::to_string(tid);
  out += ",\"args\":{\"name\":" + arg + "}},\n";
}

void append_sort_index(std::string& out, const char* name, int pid, int tid, int index,
                       bool with_tid) {
  out += "{\"ph\":\"M\",\"name\":\"";
  out += name;
  out += "\",\"pid\":" + std::to_string(pid);
  if (with_tid) out += ",\"tid\":" + std::to_string(tid);
  out += ",\"args\":{\"sort_index\":" + std::to_string(index) + "}},\n";
}

}  // namespace

std::string trace_event_json(const ProfileTrace& trace) {
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  uint64_t dropped = 0;
  for (const WorkerSpans& w : trace.workers) {
    const int pid = w.rank;
    append_metadata(out, "process_name", pid, 0,
                    quoted("worker " + std::to_string(w.rank) + (w.rank == 0 ? " (chief)" : "")),
                    false);
    append_sort_index(out, "process_sort_index", pid, 0, w.rank, false);
    for (const profiler::ThreadSpans& t : w.threads) {
      append_metadata(out, "thread_name", pid, t.tid, quoted(t.name), true);
      append_sort_index(out, "thread_sort_index", pid, t.tid, t.tid, true);
      dropped += t.dropped;
      // Parents before their children (earlier begin first, the longer of two equal begins first):
      // the order viewers expect of nested complete events.
      std::vector<const profiler::Span*> order;
      order.reserve(t.spans.size());
      for (const profiler::Span& s : t.spans) order.push_back(&s);
      std::sort(order.begin(), order.end(), span_order::parent_first);
      for (const profiler::Span* s : order) {
        std::string name = s->phase == profiler::Phase::step
                               ? "step " + std::to_string(s->step)
                               : std::string(profiler::phase_name(s->phase));
        if (s->backup) name += " (backup)";
        out += "{\"ph\":\"X\",\"cat\":\"";
        out += s->phase == profiler::Phase::step ? "step" : profiler::phase_name(s->phase);
        out += "\",\"name\":\"" + name + "\",\"pid\":" + std::to_string(pid) +
               ",\"tid\":" + std::to_string(t.tid) + ",\"ts\":";
        append_us(out, s->begin_ns - trace.origin_ns);
        out += ",\"dur\":";
        append_us(out, s->end_ns - s->begin_ns);
        out += ",\"args\":{\"step\":" + std::to_string(s->step) +
               ",\"replica\":" + std::to_string(s->replica) +
               ",\"backup\":" + (s->backup ? "true" : "false") + "}},\n";
      }
    }
  }
  // The last event's separator would make the array invalid JSON.
  if (out.size() >= 2 && out[out.size() - 2] == ',') out.erase(out.size() - 2, 1);
  out += "],\n\"otherData\":{\"producer\":\"lockstep profiler\",\"workers\":" +
         std::to_string(trace.workers.size()) + ",\"dropped_spans\":" + std::to_string(dropped) +
         "}}\n";
  return out;
}

}  // namespace lockstep::trace
