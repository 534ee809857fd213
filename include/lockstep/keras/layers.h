#pragma once
// Umbrella header of keras.layers: every layer class.
#include "lockstep/keras/layers/attention.h"
#include "lockstep/keras/layers/convolutional.h"
#include "lockstep/keras/layers/core.h"
#include "lockstep/keras/layers/embedding.h"
#include "lockstep/keras/layers/global_pooling.h"
#include "lockstep/keras/layers/merge.h"
#include "lockstep/keras/layers/normalization.h"
#include "lockstep/keras/layers/position_embedding.h"
#include "lockstep/keras/layers/preprocessing.h"
