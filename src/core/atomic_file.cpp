#include "lockstep/core/atomic_file.h"
#include "lockstep/core/check.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>

#include "lockstep/core/error.h"

namespace lockstep {
namespace {

constexpr size_t kBufferBytes = size_t{1} << 20;

[[noreturn]] void io_error(const std::string& who, const std::string& what, const std::string& path,
                           int err) {
  std::string msg = who + ": cannot " + what + " '" + path + "': " + std::strerror(err);
  if (err == ENOENT) throw NotFound(msg);
  throw Unavailable(msg);
}

std::string directory_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

AtomicFileWriter::AtomicFileWriter(std::string path, std::string who)
    : path_(std::move(path)), who_(std::move(who)) {
  static std::atomic<uint64_t> counter{0};
  tmp_ = path_ + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd_ < 0) io_error(who_, "create", tmp_, errno);
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
  }
}

void AtomicFileWriter::write(const void* data, size_t n) {
  LOCKSTEP_CHECK_AS(FailedPrecondition, fd_ >= 0, who_, ": '", path_, "' was already committed");
  const char* p = static_cast<const char*>(data);
  if (buffer_.size() + n <= kBufferBytes) {
    buffer_.append(p, n);
    return;
  }
  flush();
  if (n < kBufferBytes) {
    buffer_.append(p, n);
  } else {
    write_fully(p, n);
  }
}

void AtomicFileWriter::flush() {
  write_fully(buffer_.data(), buffer_.size());
  buffer_.clear();
}

void AtomicFileWriter::write_fully(const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      io_error(who_, "write", tmp_, errno);
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void AtomicFileWriter::commit() {
  LOCKSTEP_CHECK_AS(FailedPrecondition, fd_ >= 0, who_, ": '", path_, "' was already committed");
  flush();
  if (::fsync(fd_) != 0) io_error(who_, "fsync", tmp_, errno);
  const int fd = std::exchange(fd_, -1);
  try {
    if (::close(fd) != 0) io_error(who_, "close", tmp_, errno);
    if (::rename(tmp_.c_str(), path_.c_str()) != 0)
      io_error(who_, "rename the temporary file onto", path_, errno);
  } catch (...) {
    ::unlink(tmp_.c_str());
    throw;
  }
  // Makes the rename itself durable; a directory that cannot be opened leaves it to the system.
  const int dir = ::open(directory_of(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
}

}  // namespace lockstep
