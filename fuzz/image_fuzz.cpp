// libFuzzer target for the PNG and JPEG decoders (decode_image). The first byte picks the
// channels (0..4); the rest is the file. Every input must decode or throw DataLoss; a crash, a
// sanitizer report, another exception, an exit() from libjpeg or a huge allocation is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "lockstep/data/image.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  int channels = data[0] % 5;
  std::span<const uint8_t> bytes(data + 1, size - 1);
  try {
    lockstep::Tensor t = lockstep::decode_image(bytes, channels, "fuzz");
    if (t.rank() != 3 || t.dim(0) * t.dim(1) > lockstep::kMaxImagePixels) std::abort();
  } catch (const lockstep::DataLoss&) {
  }
  return 0;
}
