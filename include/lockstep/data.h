#pragma once
// Umbrella header of the data layer: the Dataset input pipeline, the IDX reader and the built-in
// datasets.
#include "lockstep/data/dataset.h"
#include "lockstep/data/datasets.h"
#include "lockstep/data/element.h"
#include "lockstep/data/idx.h"
