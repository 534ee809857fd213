#pragma once
// The ops layer: raw kernels, each op's `<op>_forward` beside its `<op>_backward`, recorded on no
// tape. The differentiable `<op>` (lockstep::relu, lockstep::conv2d, ...) is in the autodiff layer
// (lockstep/autodiff.h); no kernel shares its name.
#include "lockstep/ops/activations.h"
#include "lockstep/ops/attention.h"
#include "lockstep/ops/batch_matmul.h"
#include "lockstep/ops/bfloat16_values.h"
#include "lockstep/ops/cpu_kernels.h"
#include "lockstep/ops/elementwise.h"
#include "lockstep/ops/gelu.h"
#include "lockstep/ops/linear.h"
#include "lockstep/ops/losses.h"
#include "lockstep/ops/masked_softmax.h"
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
