#pragma once
// AtomicFileWriter: writes a file so that readers see either the old file or the complete new one,
// also after a crash or power loss. The bytes go to a temporary file beside the destination;
// commit() flushes it to disk (fsync), renames it onto the destination and fsyncs the directory so
// that the rename itself is durable. A writer destroyed without commit() removes its temporary
// file and leaves the destination as it was. Weights files, checkpoints and dataset caches are
// written this way.
#include <cstddef>
#include <string>

namespace lockstep {

class AtomicFileWriter {
 public:
  // Creates the temporary file `<path>.tmp.<pid>.<n>`. `who` names the operation in errors
  // ("save_safetensors"). Errors: NotFound when the directory does not exist, else Unavailable,
  // each naming the file and the system's reason.
  AtomicFileWriter(std::string path, std::string who);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  // Buffered: small writes (a dataset cache's headers) cost no system call each.
  void write(const void* data, size_t n);
  // Makes the file the destination's content; the writer is done afterwards.
  void commit();

  const std::string& path() const { return path_; }
  const std::string& temporary_path() const { return tmp_; }

 private:
  void flush();
  void write_fully(const char* p, size_t n);

  std::string path_, who_, tmp_;
  int fd_ = -1;
  std::string buffer_;
};

}  // namespace lockstep
