// libFuzzer target for the IDX parser (raw and gzip). Every input must either parse into a tensor
// whose size matches its header or throw lockstep::DataLoss; anything else (a crash, a sanitizer
// report, another exception type, a huge allocation) is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "lockstep/data/idx.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> bytes(data, size);
  try {
    // The output limit keeps gzip bombs within the fuzzer's memory budget.
    lockstep::Tensor t = lockstep::parse_idx_maybe_gzip(bytes, "fuzz", size_t{64} << 20);
    if (t.nbytes() > (size_t{64} << 20) * 4) std::abort();  // widened int8/int16 at most x4
  } catch (const lockstep::DataLoss&) {
  }
  return 0;
}
