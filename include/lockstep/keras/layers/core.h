#pragma once
// Keras' core layers (keras.layers.core and friends), each in its own header: InputLayer, Dense,
// Activation, Flatten, Reshape, Dropout.
#include "lockstep/keras/layers/activation.h"
#include "lockstep/keras/layers/dense.h"
#include "lockstep/keras/layers/dropout.h"
#include "lockstep/keras/layers/input_layer.h"
#include "lockstep/keras/layers/reshaping.h"
