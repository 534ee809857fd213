// libFuzzer target for the safetensors loader (saving/safetensors.h), which reads weights files
// and BackupAndRestore's backups. The loader reads a path, so each input is written to a file in
// /dev/shm first. Every input must either load or throw lockstep::DataLoss / InvalidArgument;
// anything else (a crash, a sanitizer report, another exception type) is a bug.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "lockstep/core/error.h"
#include "lockstep/keras/saving/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path =
      "/dev/shm/lockstep_safetensors_fuzz_" + std::to_string(::getpid()) + ".safetensors";
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (size && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  try {
    auto file = lockstep::keras::saving::load_safetensors(path);
    for (const auto& [name, t] : file.tensors) {
      if (!t.defined()) std::abort();
    }
  } catch (const lockstep::DataLoss&) {
  } catch (const lockstep::InvalidArgument&) {
  }
  return 0;
}
