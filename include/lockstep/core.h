#pragma once
// Umbrella header of the core layer.
#include "lockstep/core/bfloat16.h"
#include "lockstep/core/dtype.h"
#include "lockstep/core/error.h"
#include "lockstep/core/profiler.h"
#include "lockstep/core/random.h"
#include "lockstep/core/shape.h"
#include "lockstep/core/storage.h"
#include "lockstep/core/task_cancellation.h"
#include "lockstep/core/tensor.h"
