#pragma once
// `lockstep train --data SPEC`: the user's files as a Dataset of examples.
//   a directory     class folders of PNG / JPEG images (labels: the folders, sorted)
//   *.csv (or glob) CSV with a header; `label_column` is the label, the other columns features
//   anything else   a glob of TFRecord files of tf.train.Example: `image_feature` (bytes: PNG,
//                   JPEG, or raw uint8 with image_shape or height/width/channels int64 features)
//                   and `label_feature` (int64)
// Every source reads its files through list_files, so Dataset::shard_files (AutoShardPolicy::FILE)
// can give each worker its own.
#include <cstdint>
#include <string>
#include <vector>

#include "lockstep/data.h"

namespace lockstep::apps {

struct DataSpecOptions {
  std::string label_column = "label";
  std::string image_feature = "image";
  std::string label_feature = "label";
  std::vector<int64_t> image_shape;  // H, W, C for raw uint8 images in TFRecords
};

struct FileInput {
  std::string kind;  // "images", "csv" or "tfrecord"
  // Unbatched (x, label): x uint8[h, w, c] (images, resized to the first image's size when they
  // differ) or float32[features] (CSV); label int64[].
  Dataset examples;
  // The same labels without decoding anything (int64[]), for counting examples and classes.
  Dataset labels;
  std::vector<int64_t> shape;  // of x
  DType dtype = DType::uint8;
  int64_t classes = 0;  // image folders: the folders; otherwise found by counting
};

FileInput open_file_input(const std::string& spec, const DataSpecOptions& options);

}  // namespace lockstep::apps
