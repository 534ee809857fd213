#pragma once
// keras.utils.image_dataset_from_directory, under its Keras name. The function is built from
// data-layer stages only and is documented in lockstep/data/image_directory.h.
#include "lockstep/data/image_directory.h"

namespace lockstep::keras::utils {

using lockstep::image_dataset_from_directory;
using lockstep::image_dataset_from_directory_both;
using lockstep::ImageDatasetOptions;
using lockstep::ImageDirectoryDataset;

}  // namespace lockstep::keras::utils
