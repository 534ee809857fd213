#pragma once
// Questions about a pipeline's length beyond Dataset::cardinality(), which (as tf.data's) says
// kUnknown for a repeat() over a source of unknown length, such as a file source.
#include "lockstep/data/dataset.h"

namespace lockstep {

// True when `dataset` contains a repeat() with a negative count (repeat forever) over an input
// that is not known to be empty: iterating it never ends. AutoShardPolicy::FILE uses it to know
// it must not count the batches.
bool repeats_forever(const Dataset& dataset);

}  // namespace lockstep
