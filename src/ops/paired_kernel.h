#pragma once
// Internal to the ops layer: the oneDNN side of a kernel in a paired-rows layout, and of fused
// activations.
#include <oneapi/dnnl/dnnl.hpp>

#include "lockstep/core/paired_rows_layout.h"
#include "lockstep/ops/linear.h"

#include <optional>

namespace lockstep::ops::detail {

// The layout of `md` when it is a paired-rows one (oneDNN's "xA yB 2a" 2-D weights: blocks that
// are powers of two, no offset, no extra data), else nothing.
std::optional<PairedRowsLayout> paired_layout_of(const dnnl::memory::desc& md);

// The weights descriptor `layout` was read from; `layout` must come from bf16_kernel_layout().
const dnnl::memory::desc& paired_kernel_desc(const PairedRowsLayout& layout);
// The oneDNN post-op of a fused activation (matmul.cpp); undef for none.
dnnl::algorithm onednn_eltwise(FusedActivation activation);

}  // namespace lockstep::ops::detail
