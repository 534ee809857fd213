#pragma once
// Built-in datasets, as keras.datasets: load_data() returns ((x_train, y_train), (x_test, y_test))
// with images uint8[n, 28, 28] (0..255) and labels uint8[n] (0..9).
//
//   auto [train, test] = datasets::fashion_mnist::load_data();
//   auto& [x_train, y_train] = train;
//
// Where the files are looked for, first match wins:
//   1. the `dir` argument, if not empty;
//   2. $LOCKSTEP_DATA_DIR/<name> (name = "fashion-mnist" or "mnist"), else $LOCKSTEP_DATA_DIR;
//   3. /usr/share/datasets/<name> (Fashion-MNIST: Debian package `dataset-fashion-mnist`).
// A directory holds the four IDX files train-images-idx3-ubyte, train-labels-idx1-ubyte,
// t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte, each raw or with a .gz suffix. A missing file
// throws NotFound saying where it looked and how to get the files.
#include <string>
#include <utility>

#include "lockstep/core/tensor.h"

namespace lockstep::datasets {

using Split = std::pair<Tensor, Tensor>;    // (images, labels)
using TrainTest = std::pair<Split, Split>;  // (train, test)

// Loads the four IDX files of an MNIST-format directory and checks that they are uint8 images
// [n, rows, cols] and uint8 labels [n] with matching n, every label one of the 10 classes
// (DataLoss naming the file, the example index and the label otherwise).
TrainTest load_idx_directory(const std::string& dir, const std::string& dataset_name);

namespace fashion_mnist {
inline constexpr const char* kDefaultDir = "/usr/share/datasets/fashion-mnist";
// The directory load_data(dir) would read (after applying the rules above).
std::string resolve_dir(const std::string& dir = "");
TrainTest load_data(const std::string& dir = "");
}  // namespace fashion_mnist

namespace mnist {
inline constexpr const char* kDefaultDir = "/usr/share/datasets/mnist";
std::string resolve_dir(const std::string& dir = "");
TrainTest load_data(const std::string& dir = "");
}  // namespace mnist

}  // namespace lockstep::datasets
