#include "lockstep/keras/saving/zip_archive.h"

#include <zip.h>

#include <cstdio>

#include "lockstep/core/error.h"

namespace lockstep::keras::saving {

namespace {

std::string zip_error_text(zip_error_t* e) {
  std::string s = zip_error_strerror(e);
  zip_error_fini(e);
  return s;
}

}  // namespace

std::string write_zip(const std::vector<std::pair<std::string, std::string>>& entries) {
  zip_error_t error;
  zip_error_init(&error);
  zip_source_t* buffer = zip_source_buffer_create(nullptr, 0, 0, &error);
  if (!buffer) throw Internal("write_zip: " + zip_error_text(&error));
  // Keep the buffer alive after zip_close, which writes the archive into it.
  zip_source_keep(buffer);
  zip_t* za = zip_open_from_source(buffer, ZIP_TRUNCATE, &error);
  if (!za) {
    zip_source_free(buffer);
    throw Internal("write_zip: " + zip_error_text(&error));
  }
  for (const auto& [name, data] : entries) {
    zip_source_t* s = zip_source_buffer(za, data.data(), data.size(), 0);
    if (!s || zip_file_add(za, name.c_str(), s, ZIP_FL_ENC_UTF_8 | ZIP_FL_OVERWRITE) < 0) {
      if (s) zip_source_free(s);
      std::string why = zip_strerror(za);
      zip_discard(za);
      zip_source_free(buffer);
      throw Internal("write_zip: cannot add '" + name + "': " + why);
    }
  }
  if (zip_close(za) < 0) {
    std::string why = zip_strerror(za);
    zip_discard(za);
    zip_source_free(buffer);
    throw Internal("write_zip: " + why);
  }
  std::string out;
  zip_stat_t st;
  zip_stat_init(&st);
  if (zip_source_stat(buffer, &st) < 0 || zip_source_open(buffer) < 0) {
    zip_source_free(buffer);
    throw Internal("write_zip: cannot read the archive back.");
  }
  out.resize(static_cast<size_t>(st.size));
  zip_int64_t n = zip_source_read(buffer, out.data(), out.size());
  zip_source_close(buffer);
  zip_source_free(buffer);
  if (n != static_cast<zip_int64_t>(out.size())) {
    throw Internal("write_zip: cannot read the archive back.");
  }
  return out;
}

ZipReader::ZipReader(std::string bytes, std::string origin)
    : bytes_(std::move(bytes)), origin_(std::move(origin)) {
  zip_error_t error;
  zip_error_init(&error);
  zip_source_t* src = zip_source_buffer_create(bytes_.data(), bytes_.size(), 0, &error);
  if (!src) throw Internal("'" + origin_ + "': " + zip_error_text(&error));
  zip_t* za = zip_open_from_source(src, ZIP_RDONLY | ZIP_CHECKCONS, &error);
  if (!za) {
    zip_source_free(src);
    throw DataLoss("'" + origin_ + "' is not a .keras archive: not a readable zip file (" +
                   zip_error_text(&error) + ").");
  }
  zip_error_fini(&error);
  archive_ = za;
}

ZipReader::~ZipReader() {
  if (archive_) zip_discard(static_cast<zip_t*>(archive_));
}

std::vector<std::string> ZipReader::names() const {
  auto* za = static_cast<zip_t*>(archive_);
  std::vector<std::string> out;
  zip_int64_t n = zip_get_num_entries(za, 0);
  for (zip_int64_t i = 0; i < n; ++i) {
    const char* name = zip_get_name(za, static_cast<zip_uint64_t>(i), ZIP_FL_ENC_GUESS);
    if (name) out.emplace_back(name);
  }
  return out;
}

bool ZipReader::has(const std::string& name) const {
  return zip_name_locate(static_cast<zip_t*>(archive_), name.c_str(), 0) >= 0;
}

std::string ZipReader::read(const std::string& name, size_t max_bytes) const {
  auto* za = static_cast<zip_t*>(archive_);
  zip_int64_t index = zip_name_locate(za, name.c_str(), 0);
  if (index < 0) throw NotFound("'" + origin_ + "' has no entry '" + name + "'.");
  zip_stat_t st;
  zip_stat_init(&st);
  if (zip_stat_index(za, static_cast<zip_uint64_t>(index), 0, &st) < 0 ||
      !(st.valid & ZIP_STAT_SIZE)) {
    throw DataLoss("'" + origin_ + "': cannot read entry '" + name + "': " + zip_strerror(za));
  }
  if (st.size > max_bytes) {
    throw DataLoss("'" + origin_ + "': entry '" + name + "' claims " + std::to_string(st.size) +
                   " bytes, more than the " + std::to_string(max_bytes) + " allowed.");
  }
  zip_file_t* f = zip_fopen_index(za, static_cast<zip_uint64_t>(index), 0);
  if (!f) {
    throw DataLoss("'" + origin_ + "': cannot open entry '" + name + "': " + zip_strerror(za));
  }
  std::string out(static_cast<size_t>(st.size), '\0');
  zip_int64_t n = out.empty() ? 0 : zip_fread(f, out.data(), out.size());
  // A short read or a CRC mismatch (reported at close or as a read error) is a corrupt entry.
  std::string why = n < 0 ? zip_file_strerror(f) : "";
  int closed = zip_fclose(f);
  if (n != static_cast<zip_int64_t>(out.size()) || closed != 0) {
    throw DataLoss("'" + origin_ + "': entry '" + name + "' is corrupt or truncated" +
                   (why.empty() ? std::string(".") : " (" + why + ")."));
  }
  return out;
}

}  // namespace lockstep::keras::saving
