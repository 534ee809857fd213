#pragma once
// Umbrella header of the autodiff layer.
#include "lockstep/autodiff/gradient_tape.h"
#include "lockstep/autodiff/variable.h"
