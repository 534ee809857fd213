#pragma once
// Umbrella header of the autodiff layer: the gradient tape, variables and the differentiable ops
// (lockstep::relu, lockstep::conv2d, ...) over the ops layer's kernels.
#include "lockstep/autodiff/functions.h"
#include "lockstep/autodiff/gradient_tape.h"
#include "lockstep/autodiff/losses.h"
#include "lockstep/autodiff/nn_functions.h"
#include "lockstep/autodiff/transformer_functions.h"
#include "lockstep/autodiff/variable.h"
