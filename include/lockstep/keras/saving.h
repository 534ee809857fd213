#pragma once
// Umbrella header of keras.saving: weights files (safetensors), whole models (.keras archives),
// configs and the registry of serializable classes.
#include "lockstep/keras/saving/h5_store.h"
#include "lockstep/keras/saving/model_config.h"
#include "lockstep/keras/saving/object_registration.h"
#include "lockstep/keras/saving/safetensors.h"
#include "lockstep/keras/saving/saving_lib.h"
#include "lockstep/keras/saving/serialization_lib.h"
#include "lockstep/keras/saving/zip_archive.h"
