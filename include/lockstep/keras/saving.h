#pragma once
// Umbrella header of keras.saving.
#include "lockstep/keras/saving/safetensors.h"
