#pragma once
// The ops layer: raw kernels, each op's forward beside its backward (not recorded on any tape;
// the differentiable versions are in lockstep/autodiff/functions.h).
#include "lockstep/ops/activations.h"
#include "lockstep/ops/elementwise.h"
#include "lockstep/ops/linear.h"
#include "lockstep/ops/losses.h"
#include "lockstep/ops/matmul.h"
#include "lockstep/ops/nn_conv.h"
#include "lockstep/ops/nn_dropout.h"
#include "lockstep/ops/nn_embedding.h"
#include "lockstep/ops/nn_norm.h"
#include "lockstep/ops/nn_padding.h"
#include "lockstep/ops/nn_pool.h"
#include "lockstep/ops/reduce.h"
#include "lockstep/ops/shape_ops.h"
#include "lockstep/ops/softmax.h"
