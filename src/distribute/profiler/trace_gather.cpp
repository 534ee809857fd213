#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>

#include "lockstep/core/check.h"
#include "lockstep/core/error.h"
#include "lockstep/distribute/collective.h"
#include "lockstep/distribute/profiler.h"

namespace lockstep::distribute {

namespace {

template <typename T>
void put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof value);
}

class Reader {
 public:
  Reader(const char* data, size_t size, int rank) : p_(data), end_(data + size), rank_(rank) {}
  template <typename T>
  T get() {
    need(sizeof(T));
    T value;
    std::memcpy(&value, p_, sizeof value);
    p_ += sizeof value;
    return value;
  }
  std::string get_string(size_t n) {
    need(n);
    std::string s(p_, n);
    p_ += n;
    return s;
  }

 private:
  void need(size_t n) const {
    if (static_cast<size_t>(end_ - p_) < n) {
      throw DataLoss("gather_trace: the spans received from worker " + std::to_string(rank_) +
                     " end early (expected " + std::to_string(n) + " more bytes, received " +
                     std::to_string(end_ - p_) + ").");
    }
  }
  const char* p_;
  const char* end_;
  int rank_;
};

std::string serialize(const std::vector<profiler::ThreadSpans>& threads) {
  std::string out;
  put<uint64_t>(out, threads.size());
  for (const profiler::ThreadSpans& t : threads) {
    put<int64_t>(out, t.tid);
    put<uint64_t>(out, t.dropped);
    put<uint64_t>(out, t.name.size());
    out += t.name;
    put<uint64_t>(out, t.spans.size());
    for (const profiler::Span& s : t.spans) {
      put<int64_t>(out, s.begin_ns);
      put<int64_t>(out, s.end_ns);
      put<int64_t>(out, s.step);
      put<int32_t>(out, s.replica);
      put<uint8_t>(out, static_cast<uint8_t>(s.phase));
      put<uint8_t>(out, s.backup ? 1 : 0);
    }
  }
  return out;
}

std::vector<profiler::ThreadSpans> deserialize(const char* data, size_t size, int rank) {
  Reader in(data, size, rank);
  std::vector<profiler::ThreadSpans> threads(in.get<uint64_t>());
  for (profiler::ThreadSpans& t : threads) {
    t.tid = static_cast<int>(in.get<int64_t>());
    t.dropped = in.get<uint64_t>();
    t.name = in.get_string(in.get<uint64_t>());
    t.spans.resize(in.get<uint64_t>());
    for (profiler::Span& s : t.spans) {
      s.begin_ns = in.get<int64_t>();
      s.end_ns = in.get<int64_t>();
      s.step = in.get<int64_t>();
      s.replica = in.get<int32_t>();
      const uint8_t phase = in.get<uint8_t>();
      LOCKSTEP_CHECK_AS(DataLoss, phase < profiler::kNumPhases, "gather_trace: worker ", rank,
                        " sent phase ", phase, "; expected one below ", profiler::kNumPhases, ".");
      s.phase = static_cast<profiler::Phase>(phase);
      s.backup = in.get<uint8_t>() != 0;
    }
  }
  return threads;
}

// Processes with the same id read the same monotonic clock: the kernel's boot id (shared by the
// containers and network namespaces of one machine), else the host name.
int64_t machine_id() {
  std::string id;
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  if (!(boot && std::getline(boot, id)) || id.empty()) {
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    id = host;
  }
  return static_cast<int64_t>(std::hash<std::string>{}(id));
}

}  // namespace

ProfileTrace local_trace(int rank) {
  ProfileTrace trace;
  trace.origin_ns = profiler::session_begin_ns();
  trace.workers.push_back({rank, profiler::collect()});
  return trace;
}

ProfileTrace gather_trace(Communicator* cross) {
  if (cross == nullptr || cross->size() == 1) return local_trace(cross ? cross->rank() : 0);
  const int rank = cross->rank();
  const size_t size = static_cast<size_t>(cross->size());
  std::string mine = serialize(profiler::collect());

  cross->barrier();
  int64_t clock[2] = {profiler::now_ns(), machine_id()};
  std::vector<int64_t> clocks(2 * size);
  cross->all_gather(clock, clocks.data(), 2, DType::int64);

  int64_t length = static_cast<int64_t>(mine.size());
  std::vector<int64_t> lengths(size);
  cross->all_gather(&length, lengths.data(), 1, DType::int64);
  const size_t longest = static_cast<size_t>(*std::max_element(lengths.begin(), lengths.end()));
  mine.resize(longest);
  std::vector<char> all(longest * size);
  cross->all_gather(mine.data(), all.data(), longest, DType::uint8);
  if (rank != 0) return {};

  ProfileTrace trace;
  trace.origin_ns = profiler::session_begin_ns();
  for (size_t r = 0; r < size; ++r) {
    WorkerSpans w;
    w.rank = static_cast<int>(r);
    w.threads = deserialize(all.data() + r * longest, static_cast<size_t>(lengths[r]), w.rank);
    const bool same_clock = clocks[2 * r + 1] == clocks[1];
    const int64_t shift = same_clock ? 0 : clocks[0] - clocks[2 * r];
    if (shift != 0) {
      for (profiler::ThreadSpans& t : w.threads) {
        for (profiler::Span& s : t.spans) {
          s.begin_ns += shift;
          s.end_ns += shift;
        }
      }
    }
    trace.workers.push_back(std::move(w));
  }
  return trace;
}

}  // namespace lockstep::distribute
