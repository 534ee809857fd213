#include "lockstep/data/datasets.h"
#include "lockstep/core/check.h"

#include <sys/stat.h>

#include <cstdlib>

#include "lockstep/data/idx.h"

namespace lockstep::datasets {
namespace {

// MNIST and Fashion-MNIST both have 10 classes.
constexpr int kNumClasses = 10;

bool is_file(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}
bool is_dir(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string resolve(const std::string& dir, const char* name, const char* default_dir) {
  if (!dir.empty()) return dir;
  if (const char* env = std::getenv("LOCKSTEP_DATA_DIR"); env && *env) {
    std::string sub = std::string(env) + "/" + name;
    return is_dir(sub) ? sub : std::string(env);
  }
  return default_dir;
}

std::string how_to_get(const std::string& name) {
  if (name == "fashion-mnist") {
    return "Install the Debian package (sudo apt-get install dataset-fashion-mnist, which puts the "
           "files in /usr/share/datasets/fashion-mnist), or put the four files "
           "train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz and "
           "t10k-labels-idx1-ubyte.gz from https://github.com/zalandoresearch/fashion-mnist in a "
           "directory and pass it to load_data(dir) or set LOCKSTEP_DATA_DIR.";
  }
  return "Download MNIST's four files train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, "
         "t10k-images-idx3-ubyte.gz and t10k-labels-idx1-ubyte.gz (e.g. from "
         "https://storage.googleapis.com/cvdf-datasets/mnist/), put them in a directory (for "
         "example $LOCKSTEP_DATA_DIR/mnist) and pass it to load_data(dir) or set "
         "LOCKSTEP_DATA_DIR.";
}

std::string find_file(const std::string& dir, const std::string& base, const std::string& name) {
  for (const char* suffix : {".gz", ""}) {
    std::string p = dir + "/" + base + suffix;
    if (is_file(p)) return p;
  }
  throw NotFound("datasets::" + std::string(name == "mnist" ? "mnist" : "fashion_mnist") +
                 "::load_data: cannot find " + base + " (looked for " + dir + "/" + base +
                 ".gz and " + dir + "/" + base + "). " + how_to_get(name));
}

Split load_split(const std::string& dir, const std::string& prefix, const std::string& name) {
  std::string ipath = find_file(dir, prefix + "-images-idx3-ubyte", name);
  std::string lpath = find_file(dir, prefix + "-labels-idx1-ubyte", name);
  Tensor images = read_idx(ipath);
  Tensor labels = read_idx(lpath);
  LOCKSTEP_CHECK_AS(DataLoss, images.dtype() == DType::uint8 && images.rank() == 3, ipath,
                    ": expected uint8 images [n, rows, cols]. Received ", images.describe(), ".");
  LOCKSTEP_CHECK_AS(DataLoss, labels.dtype() == DType::uint8 && labels.rank() == 1, lpath,
                    ": expected uint8 labels [n]. Received ", labels.describe(), ".");
  LOCKSTEP_CHECK_AS(DataLoss, images.dim(0) == labels.dim(0),
                    "The image and label files disagree in count: ", ipath, " holds ",
                    images.dim(0), " images, ", lpath, " holds ", labels.dim(0), " labels.");
  // A label outside the classes would one-hot encode to a row of zeros and train on a wrong loss.
  const uint8_t* label = labels.data<uint8_t>();
  for (int64_t i = 0; i < labels.dim(0); ++i) {
    LOCKSTEP_CHECK_AS(DataLoss, label[i] < kNumClasses, lpath, ": example ", i, " has label ",
                      label[i], ", outside the classes [0, ", kNumClasses, ") of ", name, ".");
  }
  return {images, labels};
}

}  // namespace

TrainTest load_idx_directory(const std::string& dir, const std::string& dataset_name) {
  return {load_split(dir, "train", dataset_name), load_split(dir, "t10k", dataset_name)};
}

namespace fashion_mnist {
std::string resolve_dir(const std::string& dir) {
  return resolve(dir, "fashion-mnist", kDefaultDir);
}
TrainTest load_data(const std::string& dir) {
  return load_idx_directory(resolve_dir(dir), "fashion-mnist");
}
}  // namespace fashion_mnist

namespace mnist {
std::string resolve_dir(const std::string& dir) {
  return resolve(dir, "mnist", kDefaultDir);
}
TrainTest load_data(const std::string& dir) {
  return load_idx_directory(resolve_dir(dir), "mnist");
}
}  // namespace mnist

}  // namespace lockstep::datasets
