#pragma once
// keras.utils.image_dataset_from_directory: a Dataset of images and labels from a folder of class
// folders. It is built from data-layer stages only, so it lives here; Keras code reaches it as
// lockstep::keras::utils::image_dataset_from_directory (lockstep/keras/utils/image_dataset.h).
//
//   main_directory/
//     class_a/  a_image_1.jpg  a_image_2.png ...
//     class_b/  b_image_1.jpg ...
//
//   auto train = image_dataset_from_directory(
//       "main_directory", {.image_size = {28, 28}, .color_mode = "grayscale", .seed = 1337,
//                          .validation_split = 0.2, .subset = "training"});
//   train.dataset: (float32[batch, 28, 28, 1] in 0..255, int32[batch]); train.class_names.
//
// As Keras: class folders in alphanumeric order (or `class_names`, which must name them all);
// files with the extensions .png, .jpg, .jpeg (any case) found by walking each class folder
// (sub-folders included, in sorted order); the list shuffled with `seed` (if `shuffle`) before a
// `validation_split` takes the last fraction for "validation" and the rest for "training"; images
// decoded (decode_image), resized bilinearly to image_size, float32; a shuffle buffer of
// 8 * batch_size when shuffle. Label modes: "int" (int32[batch]), "categorical" (float32 one-hot
// [batch, classes]), "binary" (float32[batch, 1], exactly two classes), "" (no labels: elements
// are (images)). The list shuffle uses Lockstep's Philox, not NumPy's: the same seed gives a
// different (but fixed) order than Keras.
//
// Errors: no class folders or no images (NotFound), class_names that do not match the folders, an
// explicit label outside 0..classes-1, "binary" with other than two classes, a validation split
// outside (0, 1) or without a seed while shuffling (InvalidArgument, as Keras); a file that is
// not a PNG or JPEG despite its extension is DataLoss naming the file, when it is read.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/data/dataset.h"

namespace lockstep {

struct ImageDatasetOptions {
  std::string labels = "inferred";  // "inferred", or "" for none
  // Explicit labels, one per image file in the sorted walk order (labels "inferred" ignores it).
  std::vector<int64_t> label_list;
  std::string label_mode = "int";  // "int", "categorical", "binary", "" (none)
  std::vector<std::string> class_names;
  std::string color_mode = "rgb";                       // "grayscale", "rgb", "rgba"
  int64_t batch_size = 32;                              // 0: unbatched elements
  std::pair<int64_t, int64_t> image_size = {256, 256};  // (height, width)
  bool shuffle = true;
  std::optional<uint64_t> seed;
  double validation_split = 0.0;
  std::string subset;                              // "", "training", "validation"
  int64_t num_parallel_calls = Dataset::AUTOTUNE;  // decoding
};

struct ImageDirectoryDataset {
  Dataset dataset;
  std::vector<std::string> class_names;
  std::vector<std::string> file_paths;  // in the dataset's (pre-shuffle-buffer) order
};

ImageDirectoryDataset image_dataset_from_directory(const std::string& directory,
                                                   const ImageDatasetOptions& options = {});
// subset="both" of Keras: (training, validation).
std::pair<ImageDirectoryDataset, ImageDirectoryDataset> image_dataset_from_directory_both(
    const std::string& directory, ImageDatasetOptions options);

}  // namespace lockstep
