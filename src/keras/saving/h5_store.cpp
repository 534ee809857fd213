#include "lockstep/keras/saving/h5_store.h"

#include <hdf5.h>

#include <unistd.h>
#include <atomic>
#include <vector>

#include "lockstep/core/error.h"

namespace lockstep::keras::saving {

namespace {

// HDF5 prints its own error stack to stderr by default; Lockstep reports errors as exceptions.
void silence_hdf5() {
  static const bool once = [] {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    return true;
  }();
  (void)once;
}

// The core driver keeps files by name in memory: give each one its own.
std::string unique_image_name() {
  static std::atomic<uint64_t> n{0};
  return "lockstep-model-weights-" + std::to_string(getpid()) + "-" + std::to_string(n++) + ".h5";
}

// Closes an HDF5 handle when it goes out of scope.
class Handle {
 public:
  Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~Handle() {
    if (id_ >= 0) close_(id_);
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

hid_t file_type(DType d) {
  switch (d) {
    case DType::float32:
    case DType::bfloat16:
      return H5T_IEEE_F32LE;
    case DType::float64:
      return H5T_IEEE_F64LE;
    case DType::int32:
      return H5T_STD_I32LE;
    case DType::int64:
      return H5T_STD_I64LE;
    case DType::uint8:
      return H5T_STD_U8LE;
  }
  return H5T_IEEE_F32LE;
}

hid_t memory_type(DType d) {
  switch (d) {
    case DType::float32:
    case DType::bfloat16:
      return H5T_NATIVE_FLOAT;
    case DType::float64:
      return H5T_NATIVE_DOUBLE;
    case DType::int32:
      return H5T_NATIVE_INT32;
    case DType::int64:
      return H5T_NATIVE_INT64;
    case DType::uint8:
      return H5T_NATIVE_UINT8;
  }
  return H5T_NATIVE_FLOAT;
}

void write_string_attribute(hid_t object, const char* name, const std::string& value,
                            const std::string& where) {
  // A variable-length UTF-8 string, as h5py writes a Python str.
  Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.get(), H5T_VARIABLE);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  Handle attr(H5Acreate2(object, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT),
              H5Aclose);
  const char* p = value.c_str();
  if (!attr.ok() || H5Awrite(attr.get(), type.get(), &p) < 0) {
    throw Internal("model.weights.h5: cannot write attribute '" + std::string(name) + "' of '" +
                   where + "'.");
  }
}

std::string read_string_attribute(hid_t object, const char* name) {
  if (H5Aexists(object, name) <= 0) return "";
  Handle attr(H5Aopen(object, name, H5P_DEFAULT), H5Aclose);
  Handle type(H5Aget_type(attr.get()), H5Tclose);
  if (!attr.ok() || H5Tget_class(type.get()) != H5T_STRING) return "";
  if (H5Tis_variable_str(type.get()) > 0) {
    Handle mem(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(mem.get(), H5T_VARIABLE);
    char* p = nullptr;
    if (H5Aread(attr.get(), mem.get(), &p) < 0 || !p) return "";
    std::string out(p);
    H5free_memory(p);
    return out;
  }
  const size_t n = H5Tget_size(type.get());
  if (n == 0 || n > 4096) return "";
  std::string out(n, '\0');
  Handle mem(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(mem.get(), n);
  if (H5Aread(attr.get(), mem.get(), out.data()) < 0) return "";
  return out.substr(0, out.find('\0'));
}

}  // namespace

std::string vars_group(const std::string& path) {
  return path.empty() ? "vars" : path + "/vars";
}

struct H5Writer::Impl {
  hid_t file = -1;
};

H5Writer::H5Writer() : impl_(std::make_unique<Impl>()) {
  silence_hdf5();
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  H5Pset_fapl_core(fapl.get(), 1 << 20, /*backing_store=*/0);
  impl_->file = H5Fcreate(unique_image_name().c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get());
  if (impl_->file < 0) throw Internal("model.weights.h5: HDF5 cannot create an in-memory file.");
}

H5Writer::~H5Writer() {
  if (impl_->file >= 0) H5Fclose(impl_->file);
}

void H5Writer::make_vars(const std::string& path, const std::string& name) {
  const std::string g = vars_group(path);
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  Handle group(H5Gcreate2(impl_->file, g.c_str(), lcpl.get(), H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
  if (!group.ok()) throw Internal("model.weights.h5: cannot create group '" + g + "'.");
  write_string_attribute(group.get(), "name", name, g);
}

void H5Writer::write(const std::string& path, int index, const Tensor& value) {
  const std::string d = vars_group(path) + "/" + std::to_string(index);
  const Tensor t = value.dtype() == DType::bfloat16 ? value.to(DType::float32) : value;
  std::vector<hsize_t> dims;
  for (int i = 0; i < t.rank(); ++i) dims.push_back(static_cast<hsize_t>(t.shape()[i]));
  Handle space(
      t.rank() == 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(t.rank(), dims.data(), nullptr),
      H5Sclose);
  Handle set(H5Dcreate2(impl_->file, d.c_str(), file_type(t.dtype()), space.get(), H5P_DEFAULT,
                        H5P_DEFAULT, H5P_DEFAULT),
             H5Dclose);
  if (!set.ok() || (t.num_elements() > 0 && H5Dwrite(set.get(), memory_type(t.dtype()), H5S_ALL,
                                                     H5S_ALL, H5P_DEFAULT, t.raw_data()) < 0)) {
    throw Internal("model.weights.h5: cannot write dataset '" + d + "'.");
  }
  if (value.dtype() == DType::bfloat16) write_string_attribute(set.get(), "dtype", "bfloat16", d);
}

std::string H5Writer::finish() {
  if (H5Fflush(impl_->file, H5F_SCOPE_GLOBAL) < 0)
    throw Internal("model.weights.h5: flush failed.");
  ssize_t n = H5Fget_file_image(impl_->file, nullptr, 0);
  if (n <= 0) throw Internal("model.weights.h5: cannot read the in-memory file's image.");
  std::string bytes(static_cast<size_t>(n), '\0');
  if (H5Fget_file_image(impl_->file, bytes.data(), bytes.size()) != n) {
    throw Internal("model.weights.h5: cannot read the in-memory file's image.");
  }
  H5Fclose(impl_->file);
  impl_->file = -1;
  return bytes;
}

struct H5Reader::Impl {
  hid_t file = -1;
  std::string image;  // HDF5 reads the image in place
};

H5Reader::H5Reader(const std::string& image, std::string origin)
    : impl_(std::make_unique<Impl>()), origin_(std::move(origin)) {
  silence_hdf5();
  impl_->image = image;
  if (image.size() < 8 || image.compare(0, 8, "\x89HDF\r\n\x1a\n") != 0) {
    throw DataLoss("'" + origin_ + "' is not an HDF5 file (no HDF5 signature).");
  }
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  H5Pset_fapl_core(fapl.get(), 1 << 20, /*backing_store=*/0);
  H5Pset_file_image(fapl.get(), impl_->image.data(), impl_->image.size());
  impl_->file = H5Fopen(unique_image_name().c_str(), H5F_ACC_RDONLY, fapl.get());
  if (impl_->file < 0) throw DataLoss("'" + origin_ + "' is not a readable HDF5 file.");
}

H5Reader::~H5Reader() {
  if (impl_->file >= 0) H5Fclose(impl_->file);
}

bool H5Reader::has_vars(const std::string& path) const {
  // H5Lexists fails on a path whose parent is missing: test each prefix.
  const std::string g = vars_group(path);
  for (size_t pos = 0;;) {
    size_t slash = g.find('/', pos);
    std::string prefix = g.substr(0, slash);
    if (H5Lexists(impl_->file, prefix.c_str(), H5P_DEFAULT) <= 0) return false;
    if (slash == std::string::npos) break;
    pos = slash + 1;
  }
  H5O_info_t info;
  if (H5Oget_info_by_name(impl_->file, g.c_str(), &info, H5P_DEFAULT) < 0) return false;
  return info.type == H5O_TYPE_GROUP;
}

int H5Reader::count(const std::string& path) const {
  const std::string g = vars_group(path);
  if (!has_vars(path)) throw NotFound("'" + origin_ + "' has no group '" + g + "'.");
  Handle group(H5Gopen2(impl_->file, g.c_str(), H5P_DEFAULT), H5Gclose);
  H5G_info_t info;
  if (!group.ok() || H5Gget_info(group.get(), &info) < 0) {
    throw DataLoss("'" + origin_ + "': cannot read group '" + g + "'.");
  }
  return static_cast<int>(info.nlinks);
}

Tensor H5Reader::read(const std::string& path, int index) const {
  const std::string d = vars_group(path) + "/" + std::to_string(index);
  if (!has_vars(path) || H5Lexists(impl_->file, d.c_str(), H5P_DEFAULT) <= 0) {
    throw NotFound("'" + origin_ + "' has no dataset '" + d + "'.");
  }
  Handle set(H5Dopen2(impl_->file, d.c_str(), H5P_DEFAULT), H5Dclose);
  if (!set.ok()) throw DataLoss("'" + origin_ + "': '" + d + "' is not a dataset.");
  Handle type(H5Dget_type(set.get()), H5Tclose);
  Handle space(H5Dget_space(set.get()), H5Sclose);
  const H5T_class_t cls = H5Tget_class(type.get());
  const size_t size = H5Tget_size(type.get());
  DType dtype;
  if (cls == H5T_FLOAT && size == 4) {
    dtype = DType::float32;
  } else if (cls == H5T_FLOAT && size == 8) {
    dtype = DType::float64;
  } else if (cls == H5T_INTEGER && size == 8 && H5Tget_sign(type.get()) == H5T_SGN_2) {
    dtype = DType::int64;
  } else if (cls == H5T_INTEGER && size == 4 && H5Tget_sign(type.get()) == H5T_SGN_2) {
    dtype = DType::int32;
  } else if (cls == H5T_INTEGER && size == 1 && H5Tget_sign(type.get()) == H5T_SGN_NONE) {
    dtype = DType::uint8;
  } else {
    throw DataLoss("'" + origin_ + "': dataset '" + d +
                   "' has an unsupported type (expected float32, float64, int32, int64 or uint8).");
  }
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0 || rank > Shape::kMaxRank) {
    throw DataLoss("'" + origin_ + "': dataset '" + d + "' has rank " + std::to_string(rank) +
                   " (at most " + std::to_string(Shape::kMaxRank) + " supported).");
  }
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  if (rank > 0) H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  std::vector<int64_t> shape;
  int64_t elements = 1;
  for (hsize_t v : dims) {
    // Refuse sizes that cannot be real weights before allocating (a hostile file).
    if (v > (hsize_t(1) << 40) ||
        (v > 0 && elements > (int64_t(1) << 40) / static_cast<int64_t>(v))) {
      throw DataLoss("'" + origin_ + "': dataset '" + d + "' is implausibly large.");
    }
    elements *= static_cast<int64_t>(v);
    shape.push_back(static_cast<int64_t>(v));
  }
  Tensor t(Shape(shape), dtype);
  if (elements > 0 &&
      H5Dread(set.get(), memory_type(dtype), H5S_ALL, H5S_ALL, H5P_DEFAULT, t.raw_data()) < 0) {
    throw DataLoss("'" + origin_ + "': cannot read dataset '" + d + "'.");
  }
  if (read_string_attribute(set.get(), "dtype") == "bfloat16") return t.to(DType::bfloat16);
  return t;
}

}  // namespace lockstep::keras::saving
