#pragma once
// All Keras layers.
#include "lockstep/keras/layers/core.h"
