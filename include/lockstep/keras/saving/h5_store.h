#pragma once
// The HDF5 variable store of Keras 3's `model.weights.h5` (keras.src.saving.saving_lib.H5IOStore),
// held in memory (HDF5's core driver) so that it goes into a .keras zip without a temporary file.
//
// Layout: an object at path P (e.g. "layers/dense") keeps its variables as the datasets
// "P/vars/0", "P/vars/1", ... in the object's variable order; the group "P/vars" has the string
// attribute `name` (the object's name). The model itself is P = "" (the group "vars"). Datasets
// hold the variable's values in its dtype (float32, float64, int32, int64, uint8), a scalar as a
// scalar dataspace; a bfloat16 variable is written as float32 with the attribute dtype="bfloat16",
// as Keras writes it.
//
// Errors name `origin` (the file, "m.keras/model.weights.h5") and the entry: an image that is not
// HDF5 is DataLoss, a missing group or dataset NotFound, an unsupported dataset type DataLoss.
#include <memory>
#include <string>

#include "lockstep/core/tensor.h"

namespace lockstep::keras::saving {

class H5Writer {
 public:
  H5Writer();
  ~H5Writer();
  H5Writer(const H5Writer&) = delete;
  H5Writer& operator=(const H5Writer&) = delete;

  // Creates the group "P/vars" (or "vars" for P = "") and its `name` attribute.
  void make_vars(const std::string& path, const std::string& name);
  // Writes dataset "P/vars/<index>" (make_vars(P) first).
  void write(const std::string& path, int index, const Tensor& value);
  // Closes the file and returns its bytes; the writer is done afterwards.
  std::string finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class H5Reader {
 public:
  // Opens an HDF5 file image (the bytes of model.weights.h5).
  H5Reader(const std::string& image, std::string origin);
  ~H5Reader();
  H5Reader(const H5Reader&) = delete;
  H5Reader& operator=(const H5Reader&) = delete;

  // Whether the group "P/vars" exists.
  bool has_vars(const std::string& path) const;
  // The number of datasets in "P/vars" (NotFound when the group is missing).
  int count(const std::string& path) const;
  // Dataset "P/vars/<index>", converted back to bfloat16 when its dtype attribute says so.
  Tensor read(const std::string& path, int index) const;
  const std::string& origin() const { return origin_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string origin_;
};

// "P/vars" for P, or "vars" for the model itself (P = "").
std::string vars_group(const std::string& path);

}  // namespace lockstep::keras::saving
