#pragma once
// Umbrella header of the keras layer: layers, models (compile / fit / evaluate / predict), losses,
// metrics, optimizers, callbacks, mixed precision, weights files and utils
// (image_dataset_from_directory).
#include "lockstep/keras/activations.h"
#include "lockstep/keras/callbacks.h"
#include "lockstep/keras/export/onnx.h"
#include "lockstep/keras/initializers.h"
#include "lockstep/keras/keras_tensor.h"
#include "lockstep/keras/layer.h"
#include "lockstep/keras/layers.h"
#include "lockstep/keras/losses.h"
#include "lockstep/keras/metrics.h"
#include "lockstep/keras/mixed_precision.h"
#include "lockstep/keras/model.h"
#include "lockstep/keras/optimizers.h"
#include "lockstep/keras/saving.h"
#include "lockstep/keras/sequential.h"
#include "lockstep/keras/utils/image_dataset.h"
