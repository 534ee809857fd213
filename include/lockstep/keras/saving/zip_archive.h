#pragma once
// The zip container of a `.keras` archive, through libzip, in memory: the archive is built as
// bytes (then written atomically by the caller) and read from bytes (so that a fuzzer or a test
// can hand it any input).
#include <string>
#include <utility>
#include <vector>

namespace lockstep::keras::saving {

// A zip holding `entries` ({name, bytes}, in order, deflated).
std::string write_zip(const std::vector<std::pair<std::string, std::string>>& entries);

class ZipReader {
 public:
  // `origin` names the archive in errors. Bytes that are not a zip (or a truncated one) throw
  // DataLoss naming `origin` and libzip's reason.
  ZipReader(std::string bytes, std::string origin);
  ~ZipReader();
  ZipReader(const ZipReader&) = delete;
  ZipReader& operator=(const ZipReader&) = delete;

  std::vector<std::string> names() const;
  bool has(const std::string& name) const;
  // The entry's bytes. NotFound naming the archive and entry when missing; DataLoss when the
  // entry is corrupt or larger than `max_bytes` (a zip bomb).
  std::string read(const std::string& name, size_t max_bytes = size_t(1) << 32) const;

 private:
  std::string bytes_, origin_;
  void* archive_ = nullptr;  // zip_t
};

}  // namespace lockstep::keras::saving
