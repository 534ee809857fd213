#pragma once
// Umbrella header of the data layer: the Dataset input pipeline, the file sources (TFRecord and
// tf.train.Example, text lines, CSV, images and image folders), the IDX reader and the built-in
// datasets.
#include "lockstep/data/bytes.h"
#include "lockstep/data/cardinality.h"
#include "lockstep/data/crc32c.h"
#include "lockstep/data/dataset.h"
#include "lockstep/data/datasets.h"
#include "lockstep/data/element.h"
#include "lockstep/data/example.h"
#include "lockstep/data/idx.h"
#include "lockstep/data/image.h"
#include "lockstep/data/image_directory.h"
#include "lockstep/data/text.h"
#include "lockstep/data/tfrecord.h"
