#include "lockstep/keras/saving/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "lockstep/core/atomic_file.h"
#include "lockstep/core/check.h"
#include "lockstep/core/error.h"

namespace lockstep::keras::saving {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; Lockstep writes tensors' bytes as they are");

namespace {

constexpr const char* kFormat = "lockstep.format";
constexpr const char* kCrc = "lockstep.crc32";
constexpr const char* kTensorCrc = "lockstep.tensor_crc32";
constexpr const char* kHeaderCrc = "lockstep.header_crc32";
constexpr const char* kHeaderCrcField = "\"lockstep.header_crc32\":\"";
// The reference implementation's limit; a larger length is corruption, not a header to allocate.
constexpr uint64_t kMaxHeader = 100'000'000;

struct DTypeName {
  DType dtype;
  const char* name;
};
constexpr DTypeName kDTypes[] = {{DType::float32, "F32"}, {DType::bfloat16, "BF16"},
                                 {DType::float64, "F64"}, {DType::int32, "I32"},
                                 {DType::int64, "I64"},   {DType::uint8, "U8"}};
// Valid safetensors dtypes Lockstep has no tensor type for.
const std::set<std::string> kOtherSpecDTypes = {"BOOL", "I8",  "U16",     "I16",     "F16",
                                                "U32",  "U64", "F8_E5M2", "F8_E4M3", "F4"};

const char* dtype_code(DType d) {
  for (const auto& e : kDTypes) {
    if (e.dtype == d) return e.name;
  }
  throw Internal("save_safetensors: no safetensors name for dtype " + std::string(dtype_name(d)));
}

uint32_t crc(uint32_t running, const void* data, size_t n) {
  const auto* p = static_cast<const Bytef*>(data);
  // zlib's length is uInt: feed large buffers in pieces.
  while (n > 0) {
    const uInt piece = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    running = static_cast<uint32_t>(crc32(running, p, piece));
    p += piece;
    n -= piece;
  }
  return running;
}

std::string hex8(uint32_t v) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

bool parse_hex8(const std::string& s, uint32_t& out) {
  if (s.size() != 8) return false;
  out = 0;
  for (char ch : s) {
    int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
    if (d < 0) return false;
    out = out << 4 | static_cast<uint32_t>(d);
  }
  return true;
}

[[noreturn]] void io_error(const std::string& what, const std::string& path, int err) {
  std::string msg = what + " '" + path + "': " + std::strerror(err);
  if (err == ENOENT) throw NotFound(msg);
  throw Unavailable(msg);
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

}  // namespace

void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::set<std::string> seen;
  for (const auto& [name, t] : tensors) {
    LOCKSTEP_CHECK(!name.empty() && name != "__metadata__",
                   "save_safetensors: expected non-empty tensor names other than '__metadata__'. "
                   "Received: name='",
                   name, "'");
    LOCKSTEP_CHECK(seen.insert(name).second,
                   "save_safetensors: expected unique tensor names. Received: '", name, "' twice.");
    LOCKSTEP_CHECK(t.defined(), "save_safetensors: tensor '", name, "' is undefined.");
  }
  for (const char* reserved : {kFormat, kCrc, kTensorCrc, kHeaderCrc}) {
    LOCKSTEP_CHECK(!metadata.count(reserved), "save_safetensors: the metadata key '", reserved,
                   "' is reserved by Lockstep.");
  }

  uint32_t data_crc = crc(0, nullptr, 0);
  std::string tensor_crcs;
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  nlohmann::ordered_json meta = nlohmann::ordered_json::object();
  for (const auto& [k, v] : metadata) meta[k] = v;
  uint64_t offset = 0;
  std::vector<std::pair<std::string, nlohmann::ordered_json>> entries;
  for (const auto& [name, t] : tensors) {
    data_crc = crc(data_crc, t.raw_data(), t.nbytes());
    if (!tensor_crcs.empty()) tensor_crcs += ',';
    tensor_crcs += hex8(crc(crc(0, nullptr, 0), t.raw_data(), t.nbytes()));
    entries.emplace_back(name,
                         nlohmann::ordered_json{{"dtype", dtype_code(t.dtype())},
                                                {"shape", t.shape().to_vector()},
                                                {"data_offsets", {offset, offset + t.nbytes()}}});
    offset += t.nbytes();
  }
  meta[kFormat] = "1";
  meta[kCrc] = hex8(data_crc);
  meta[kTensorCrc] = tensor_crcs;
  meta[kHeaderCrc] = "00000000";
  header["__metadata__"] = meta;
  for (auto& [name, e] : entries) header[name] = std::move(e);

  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgument(std::string("save_safetensors: tensor names and metadata must be valid "
                                      "UTF-8: ") +
                          e.what());
  }
  text.append((8 - (8 + text.size()) % 8) % 8, ' ');
  std::string bytes(8, '\0');
  const uint64_t n = text.size();
  std::memcpy(bytes.data(), &n, 8);
  bytes += text;
  // The metadata object comes first and its keys cannot contain an unescaped quote, so the first
  // occurrence of the field is ours.
  const size_t at = bytes.find(kHeaderCrcField) + std::strlen(kHeaderCrcField);
  const std::string header_crc = hex8(crc(crc(0, nullptr, 0), bytes.data(), bytes.size()));
  bytes.replace(at, 8, header_crc);

  AtomicFileWriter file(path, "save_safetensors");
  file.write(bytes.data(), bytes.size());
  for (const auto& [name, t] : tensors) file.write(t.raw_data(), t.nbytes());
  file.commit();
}

namespace {

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;
};

class Loader {
 public:
  explicit Loader(std::string path) : path_(std::move(path)) {}

  [[noreturn]] void corrupt(const std::string& what, uint64_t offset) const {
    throw DataLoss("load_safetensors: '" + path_ + "' is truncated or corrupt: " + what +
                   " (at byte offset " + std::to_string(offset) + " of " + std::to_string(size_) +
                   ").");
  }

  void read_at(void* dst, size_t n, uint64_t offset) const {
    char* p = static_cast<char*>(dst);
    while (n > 0) {
      ssize_t r = ::pread(fd_, p, n, static_cast<off_t>(offset));
      if (r < 0) {
        if (errno == EINTR) continue;
        io_error("load_safetensors: cannot read", path_, errno);
      }
      if (r == 0) corrupt("unexpected end of file", offset);
      p += r;
      n -= static_cast<size_t>(r);
      offset += static_cast<uint64_t>(r);
    }
  }

  SafetensorsFile load() {
    Fd fd(::open(path_.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0) {
      if (errno == ENOENT) throw NotFound("load_safetensors: no such file: '" + path_ + "'.");
      io_error("load_safetensors: cannot open", path_, errno);
    }
    fd_ = fd.get();
    struct stat st {};
    if (::fstat(fd_, &st) != 0) io_error("load_safetensors: cannot stat", path_, errno);
    size_ = static_cast<uint64_t>(st.st_size);
    if (size_ < 8) corrupt("the file is shorter than the 8-byte header length", size_);
    uint64_t n = 0;
    read_at(&n, 8, 0);
    if (n < 2 || n > kMaxHeader || n > size_ - 8) {
      corrupt("header length " + std::to_string(n) + " does not fit in the file", 0);
    }
    std::string bytes(8 + n, '\0');
    read_at(bytes.data(), bytes.size(), 0);
    if (bytes[8] != '{') corrupt("the header does not start with '{'", 8);

    std::set<std::string> keys;
    std::string duplicate;
    nlohmann::json header;
    try {
      header = nlohmann::json::parse(
          bytes.begin() + 8, bytes.end(),
          [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
            if (event == nlohmann::json::parse_event_t::key && depth == 1 &&
                !keys.insert(parsed.get<std::string>()).second) {
              duplicate = parsed.get<std::string>();
            }
            return true;
          });
    } catch (const nlohmann::json::parse_error& e) {
      corrupt(std::string("the JSON header does not parse: ") + e.what(), 8 + e.byte);
    } catch (const nlohmann::json::exception& e) {
      // A number out of range ("9e99999"), found by fuzzing: nlohmann reports it as out_of_range.
      corrupt(std::string("the JSON header does not parse: ") + e.what(), 8);
    }
    if (!duplicate.empty()) corrupt("the header names '" + duplicate + "' twice", 8);
    if (!header.is_object()) corrupt("the header is not a JSON object", 8);

    SafetensorsFile out;
    bool checksummed = false;
    uint32_t data_crc = 0;
    std::vector<uint32_t> tensor_crcs;
    if (header.contains("__metadata__")) {
      const auto& meta = header["__metadata__"];
      if (!meta.is_object()) corrupt("__metadata__ is not an object", 8);
      for (const auto& [k, v] : meta.items()) {
        if (!v.is_string()) corrupt("__metadata__['" + k + "'] is not a string", 8);
        out.metadata[k] = v.get<std::string>();
      }
      checksummed = verify_header(out.metadata, bytes, data_crc, tensor_crcs);
    }

    std::vector<Entry> entries;
    for (const auto& [name, e] : header.items()) {
      if (name == "__metadata__") continue;
      entries.push_back(parse_entry(name, e));
    }
    std::sort(entries.begin(), entries.end(),
              [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
    const uint64_t data_start = 8 + n, data_size = size_ - data_start;
    uint64_t expect = 0;
    for (const Entry& e : entries) {
      if (e.begin != expect) {
        corrupt("tensor '" + e.name + "' data_offsets [" + std::to_string(e.begin) + ", " +
                    std::to_string(e.end) + "] leave a gap or overlap (expected begin " +
                    std::to_string(expect) + ")",
                data_start + std::min(e.begin, expect));
      }
      expect = e.end;
    }
    if (expect != data_size) {
      corrupt("the tensors cover " + std::to_string(expect) + " data bytes but the file holds " +
                  std::to_string(data_size),
              data_start + std::min(expect, data_size));
    }
    if (checksummed && tensor_crcs.size() != entries.size()) {
      corrupt("lockstep.tensor_crc32 lists " + std::to_string(tensor_crcs.size()) +
                  " checksums for " + std::to_string(entries.size()) + " tensors",
              8);
    }

    uint32_t running = crc(0, nullptr, 0);
    for (size_t i = 0; i < entries.size(); ++i) {
      const Entry& e = entries[i];
      Tensor t(e.shape, e.dtype);
      read_at(t.raw_data(), t.nbytes(), data_start + e.begin);
      if (checksummed) {
        running = crc(running, t.raw_data(), t.nbytes());
        if (crc(crc(0, nullptr, 0), t.raw_data(), t.nbytes()) != tensor_crcs[i]) {
          corrupt("checksum mismatch in the data of tensor '" + e.name + "' (file bytes [" +
                      std::to_string(data_start + e.begin) + ", " +
                      std::to_string(data_start + e.end) + "))",
                  data_start + e.begin);
        }
      }
      out.tensors.emplace_back(e.name, std::move(t));
    }
    if (checksummed && running != data_crc) corrupt("checksum mismatch in the data", data_start);
    for (const char* k : {kFormat, kCrc, kTensorCrc, kHeaderCrc}) out.metadata.erase(k);
    return out;
  }

 private:
  // Returns true when the file carries Lockstep's checksums (then verified); false for files from
  // other writers.
  bool verify_header(const std::map<std::string, std::string>& meta, std::string bytes,
                     uint32_t& data_crc, std::vector<uint32_t>& tensor_crcs) const {
    int present = 0;
    for (const char* k : {kFormat, kCrc, kTensorCrc, kHeaderCrc}) present += meta.count(k) ? 1 : 0;
    bool any_lockstep = false;
    for (const auto& [k, v] : meta) any_lockstep |= k.rfind("lockstep.", 0) == 0;
    if (present == 0 && !any_lockstep) return false;
    // A single damaged key must not turn checking off: all four are required once one is there.
    if (present != 4) corrupt("Lockstep's checksum entries in __metadata__ are incomplete", 8);
    uint32_t stored = 0;
    if (!parse_hex8(meta.at(kHeaderCrc), stored)) corrupt("lockstep.header_crc32 is malformed", 8);
    const size_t at = bytes.find(kHeaderCrcField);
    if (at == std::string::npos)
      corrupt("lockstep.header_crc32 is not where Lockstep writes it", 8);
    bytes.replace(at + std::strlen(kHeaderCrcField), 8, "00000000");
    if (crc(crc(0, nullptr, 0), bytes.data(), bytes.size()) != stored) {
      corrupt("checksum mismatch in the header (bytes [0, " + std::to_string(bytes.size()) + "))",
              0);
    }
    LOCKSTEP_CHECK(meta.at(kFormat) == "1", "load_safetensors: '", path_, "' has lockstep.format '",
                   meta.at(kFormat), "'; this Lockstep reads format 1.");
    if (!parse_hex8(meta.at(kCrc), data_crc)) corrupt("lockstep.crc32 is malformed", 8);
    const std::string& list = meta.at(kTensorCrc);
    for (size_t pos = 0; pos < list.size();) {
      size_t comma = std::min(list.find(',', pos), list.size());
      uint32_t v = 0;
      if (!parse_hex8(list.substr(pos, comma - pos), v)) {
        corrupt("lockstep.tensor_crc32 is malformed", 8);
      }
      tensor_crcs.push_back(v);
      pos = comma + 1;
    }
    return true;
  }

  Entry parse_entry(const std::string& name, const nlohmann::json& e) const {
    auto bad = [&](const std::string& what) { corrupt("tensor '" + name + "': " + what, 8); };
    if (name.empty()) bad("empty tensor name");
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") ||
        !e.contains("data_offsets")) {
      bad("expected an object with dtype, shape and data_offsets");
    }
    const auto& jd = e["dtype"];
    if (!jd.is_string()) bad("dtype is not a string");
    const std::string code = jd.get<std::string>();
    Entry out{name, DType::float32, {}, 0, 0};
    bool known = false;
    for (const auto& d : kDTypes) {
      if (code == d.name) {
        out.dtype = d.dtype;
        known = true;
      }
    }
    if (!known) {
      LOCKSTEP_CHECK(
          !kOtherSpecDTypes.count(code), "load_safetensors: tensor '", name, "' in '", path_,
          "' has dtype ", code,
          ", which Lockstep does not support. Expected one of F32, BF16, F64, I32, I64, U8.");
      bad("unknown dtype '" + code + "'");
    }
    const auto& js = e["shape"];
    if (!js.is_array()) bad("shape is not an array");
    LOCKSTEP_CHECK(js.size() <= static_cast<size_t>(Shape::kMaxRank), "load_safetensors: tensor '",
                   name, "' in '", path_, "' has rank ", js.size(),
                   "; Lockstep supports ranks up to ", Shape::kMaxRank, ".");
    // The element count is bounded by the file size before anything is allocated.
    uint64_t elements = 1;
    bool overflow = false;
    for (const auto& d : js) {
      if (!d.is_number_unsigned()) bad("shape holds a value that is not a non-negative integer");
      const uint64_t v = d.get<uint64_t>();
      if (v > static_cast<uint64_t>(INT64_MAX)) bad("shape dimension too large");
      if (v != 0 && elements > size_ / v) overflow = true;
      elements *= v;
      out.shape.push_back(static_cast<int64_t>(v));
    }
    const auto& jo = e["data_offsets"];
    if (!jo.is_array() || jo.size() != 2 || !jo[0].is_number_unsigned() ||
        !jo[1].is_number_unsigned()) {
      bad("data_offsets is not a pair of non-negative integers");
    }
    out.begin = jo[0].get<uint64_t>();
    out.end = jo[1].get<uint64_t>();
    if (out.begin > out.end || out.end > size_) {
      bad("data_offsets [" + std::to_string(out.begin) + ", " + std::to_string(out.end) +
          "] do not fit in the file");
    }
    if (overflow || elements * dtype_size(out.dtype) != out.end - out.begin) {
      bad("shape " + out.shape.to_string() + " of " + code + " does not match data_offsets [" +
          std::to_string(out.begin) + ", " + std::to_string(out.end) + "]");
    }
    return out;
  }

  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

}  // namespace

SafetensorsFile load_safetensors(const std::string& path) {
  return Loader(path).load();
}

}  // namespace lockstep::keras::saving
