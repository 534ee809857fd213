#pragma once
// Everything: core, trace, ops, autodiff, data, distribute, keras.
#include "lockstep/autodiff.h"
#include "lockstep/core.h"
#include "lockstep/data.h"
#include "lockstep/distribute.h"
#include "lockstep/keras.h"
#include "lockstep/ops.h"
#include "lockstep/trace.h"
