#pragma once
// Umbrella header of the core layer: Tensor and its storage, shapes, dtypes, bfloat16, Philox
// random numbers, errors with status codes and the LOCKSTEP_CHECK argument check, task
// cancellation, CPU topology, atomic file writes.
#include "lockstep/core/atomic_file.h"
#include "lockstep/core/bfloat16.h"
#include "lockstep/core/check.h"
#include "lockstep/core/cpu_cores.h"
#include "lockstep/core/cpu_isa.h"
#include "lockstep/core/denormals.h"
#include "lockstep/core/dtype.h"
#include "lockstep/core/error.h"
#include "lockstep/core/profiler.h"
#include "lockstep/core/random.h"
#include "lockstep/core/shape.h"
#include "lockstep/core/storage.h"
#include "lockstep/core/task_cancellation.h"
#include "lockstep/core/tensor.h"
