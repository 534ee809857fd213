#include "lockstep/data/idx.h"
#include "lockstep/core/check.h"

#include <zlib.h>

#include <cstdio>
#include <cstring>
#include <limits>

namespace lockstep {
namespace {

[[noreturn]] void corrupt(const std::string& name, uint64_t offset, const std::string& what) {
  throw DataLoss("IDX file " + name + " is corrupt at byte offset " + std::to_string(offset) +
                 ": " + what + ".");
}

uint32_t be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

struct IdxType {
  DType dtype;
  size_t file_bytes;  // bytes per element in the file
  const char* name;
};

bool idx_type(uint8_t code, IdxType& out) {
  switch (code) {
    case 0x08:
      out = {DType::uint8, 1, "uint8"};
      return true;
    case 0x09:
      out = {DType::int32, 1, "int8"};
      return true;
    case 0x0B:
      out = {DType::int32, 2, "int16"};
      return true;
    case 0x0C:
      out = {DType::int32, 4, "int32"};
      return true;
    case 0x0D:
      out = {DType::float32, 4, "float32"};
      return true;
    case 0x0E:
      out = {DType::float64, 8, "float64"};
      return true;
    default:
      return false;
  }
}

template <typename T, size_t N>
void load_big_endian(const uint8_t* src, T* dst, int64_t n) {
  static_assert(sizeof(T) == N);
  for (int64_t i = 0; i < n; ++i) {
    uint8_t b[N];
    for (size_t k = 0; k < N; ++k) b[k] = src[static_cast<size_t>(i) * N + N - 1 - k];
    std::memcpy(&dst[i], b, N);
  }
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  LOCKSTEP_CHECK_AS(NotFound, f, "Cannot open IDX file ", path, ": ", std::strerror(errno), ".");
  std::vector<uint8_t> bytes;
  uint8_t buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) bytes.insert(bytes.end(), buf, buf + n);
  bool err = std::ferror(f);
  std::fclose(f);
  if (err)
    throw DataLoss("Read error on IDX file " + path + " after " + std::to_string(bytes.size()) +
                   " bytes.");
  return bytes;
}

}  // namespace

bool is_gzip(std::span<const uint8_t> bytes) {
  return bytes.size() >= 2 && bytes[0] == 0x1f && bytes[1] == 0x8b;
}

Tensor parse_idx(std::span<const uint8_t> bytes, const std::string& name) {
  if (bytes.size() < 4) {
    corrupt(name, bytes.size(),
            "truncated header (" + std::to_string(bytes.size()) +
                " bytes; an IDX header needs at least 4)");
  }
  if (bytes[0] != 0 || bytes[1] != 0) {
    char magic[16];
    std::snprintf(magic, sizeof magic, "%02x %02x", bytes[0], bytes[1]);
    corrupt(name, 0,
            std::string("bad magic number: expected 00 00, found ") + magic +
                (is_gzip(bytes) ? " (gzip data: read it with read_idx)" : ""));
  }
  IdxType type;
  if (!idx_type(bytes[2], type)) {
    corrupt(
        name, 2, "unknown element type 0x" + [&] {
          char b[8];
          std::snprintf(b, sizeof b, "%02x", bytes[2]);
          return std::string(b);
        }() + " (expected 08, 09, 0b, 0c, 0d or 0e)");
  }
  int rank = bytes[3];
  if (rank < 1 || rank > Shape::kMaxRank) {
    corrupt(name, 3,
            "rank " + std::to_string(rank) + " is out of range (1.." +
                std::to_string(Shape::kMaxRank) + ")");
  }
  size_t header = 4 + 4 * static_cast<size_t>(rank);
  if (bytes.size() < header) {
    corrupt(name, bytes.size(),
            "truncated header: rank " + std::to_string(rank) + " needs " + std::to_string(header) +
                " header bytes, the file has " + std::to_string(bytes.size()));
  }
  std::vector<int64_t> dims(static_cast<size_t>(rank));
  std::string dims_str = "[";
  // Sizes are checked against the file length before anything is allocated, with overflow checks,
  // so a header claiming 2^32 x 2^32 elements is rejected, not allocated.
  uint64_t count = 1;
  bool overflow = false;
  for (int i = 0; i < rank; ++i) {
    uint32_t d = be32(&bytes[4 + 4 * static_cast<size_t>(i)]);
    dims[static_cast<size_t>(i)] = d;
    dims_str += (i ? ", " : "") + std::to_string(d);
    if (d != 0 && count > std::numeric_limits<uint64_t>::max() / d) overflow = true;
    count *= d;
  }
  dims_str += "]";
  uint64_t available = bytes.size() - header;
  if (overflow || count > available / type.file_bytes) {
    corrupt(
        name, bytes.size(),
        "dimensions " + dims_str + " of " + type.name + " need " +
            (overflow ? std::string("more than 2^64") : std::to_string(count * type.file_bytes)) +
            " data bytes after the " + std::to_string(header) +
            "-byte header, but the file has only " + std::to_string(available) +
            " (truncated file or oversized dimension)");
  }
  uint64_t needed = count * type.file_bytes;
  if (available != needed) {
    corrupt(name, header + needed,
            std::to_string(available - needed) +
                " unexpected trailing bytes after the data of shape " + dims_str);
  }
  Tensor t{Shape(dims), type.dtype};
  const uint8_t* src = bytes.data() + header;
  int64_t n = static_cast<int64_t>(count);
  switch (bytes[2]) {
    case 0x08:
      if (n) std::memcpy(t.raw_data(), src, static_cast<size_t>(n));
      break;
    case 0x09: {
      int32_t* d = t.data<int32_t>();
      for (int64_t i = 0; i < n; ++i) d[i] = static_cast<int8_t>(src[i]);
      break;
    }
    case 0x0B: {
      int32_t* d = t.data<int32_t>();
      for (int64_t i = 0; i < n; ++i) {
        d[i] = static_cast<int16_t>((uint16_t{src[2 * i]} << 8) | src[2 * i + 1]);
      }
      break;
    }
    case 0x0C:
      load_big_endian<int32_t, 4>(src, t.data<int32_t>(), n);
      break;
    case 0x0D:
      load_big_endian<float, 4>(src, t.data<float>(), n);
      break;
    case 0x0E:
      load_big_endian<double, 8>(src, t.data<double>(), n);
      break;
  }
  return t;
}

std::vector<uint8_t> gunzip(std::span<const uint8_t> bytes, const std::string& name,
                            size_t max_bytes) {
  z_stream zs{};
  const int init = inflateInit2(&zs, 16 + MAX_WBITS);
  LOCKSTEP_CHECK_AS(Internal, init == Z_OK, "gunzip: inflateInit2 failed for ", name, ".");
  std::vector<uint8_t> out;
  size_t pos = 0;
  auto fail = [&](const std::string& what) {
    size_t offset = pos - zs.avail_in;
    inflateEnd(&zs);
    throw DataLoss("gzip file " + name + " is corrupt at compressed byte offset " +
                   std::to_string(offset) + ": " + what + ".");
  };
  // zlib's avail_in is 32-bit: feed at most 1 GiB at a time.
  constexpr size_t kChunk = size_t{1} << 30;
  uint8_t buf[1 << 16];
  int ret = Z_OK;
  for (;;) {
    if (zs.avail_in == 0 && pos < bytes.size()) {
      size_t n = std::min(kChunk, bytes.size() - pos);
      zs.next_in = const_cast<Bytef*>(bytes.data() + pos);
      zs.avail_in = static_cast<uInt>(n);
      pos += n;
    }
    zs.next_out = buf;
    zs.avail_out = sizeof buf;
    ret = inflate(&zs, Z_NO_FLUSH);
    size_t produced = sizeof buf - zs.avail_out;
    if (out.size() + produced > max_bytes) {
      fail("decompressed data exceeds the limit of " + std::to_string(max_bytes) + " bytes");
    }
    out.insert(out.end(), buf, buf + produced);
    if (ret == Z_STREAM_END) {
      // Skip to the next member, if any (gzip allows concatenation).
      if (zs.avail_in == 0 && pos >= bytes.size()) break;
      if (inflateReset(&zs) != Z_OK) fail("cannot start the next gzip member");
      continue;
    }
    if (ret == Z_BUF_ERROR && zs.avail_in == 0 && pos >= bytes.size()) {
      fail("truncated stream (ended before the end of the compressed data)");
    }
    if (ret != Z_OK && ret != Z_BUF_ERROR) fail(zs.msg ? zs.msg : "inflate error");
  }
  inflateEnd(&zs);
  return out;
}

Tensor parse_idx_maybe_gzip(std::span<const uint8_t> bytes, const std::string& name,
                            size_t max_bytes) {
  if (is_gzip(bytes)) {
    std::vector<uint8_t> raw = gunzip(bytes, name, max_bytes);
    return parse_idx(raw, name + " (decompressed)");
  }
  return parse_idx(bytes, name);
}

Tensor read_idx(const std::string& path) {
  return parse_idx_maybe_gzip(read_file(path), path);
}

std::vector<uint8_t> encode_idx(const Tensor& t) {
  uint8_t code;
  switch (t.dtype()) {
    case DType::uint8:
      code = 0x08;
      break;
    case DType::int32:
      code = 0x0C;
      break;
    case DType::float32:
      code = 0x0D;
      break;
    case DType::float64:
      code = 0x0E;
      break;
    default:
      throw InvalidArgument("write_idx: IDX holds uint8, int32, float32 or float64. Received " +
                            t.describe() + ".");
  }
  LOCKSTEP_CHECK(t.rank() >= 1, "write_idx: IDX needs rank >= 1. Received ", t.describe(), ".");
  std::vector<uint8_t> out = {0, 0, code, static_cast<uint8_t>(t.rank())};
  for (int64_t d : t.shape().dims()) {
    LOCKSTEP_CHECK(d <= std::numeric_limits<uint32_t>::max(),
                   "write_idx: dimension too large for IDX in ", t.describe(), ".");
    for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<uint8_t>(d >> s));
  }
  size_t es = dtype_size(t.dtype());
  const uint8_t* src = static_cast<const uint8_t*>(t.raw_data());
  size_t base = out.size();
  out.resize(base + t.nbytes());
  for (size_t i = 0; i < t.nbytes(); i += es) {
    for (size_t k = 0; k < es; ++k) out[base + i + k] = src[i + es - 1 - k];
  }
  return out;
}

void write_idx(const std::string& path, const Tensor& t, bool gzip) {
  std::vector<uint8_t> bytes = encode_idx(t);
  if (gzip) {
    gzFile f = gzopen(path.c_str(), "wb");
    LOCKSTEP_CHECK_AS(NotFound, f, "write_idx: cannot create ", path, ".");
    bool ok = bytes.empty() || gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) ==
                                   static_cast<int>(bytes.size());
    ok = gzclose(f) == Z_OK && ok;
    if (!ok) throw DataLoss("write_idx: writing " + path + " failed.");
    return;
  }
  std::FILE* f = std::fopen(path.c_str(), "wb");
  LOCKSTEP_CHECK_AS(NotFound, f, "write_idx: cannot create ", path, ".");
  bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  ok = std::fclose(f) == 0 && ok;
  if (!ok) throw DataLoss("write_idx: writing " + path + " failed.");
}

}  // namespace lockstep
