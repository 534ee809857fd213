#include "paired_kernel.h"

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <tuple>
#include <vector>

#include "lockstep/core/check.h"
#include "lockstep/ops/linear.h"

#include "onednn.h"

namespace lockstep::ops {
namespace {

// A layout and the descriptor it was read from, interned: one object per distinct layout for the
// life of the process, so that a pointer to it identifies it and outlives every variable.
struct Interned {
  PairedRowsLayout layout;
  dnnl::memory::desc desc;
};

std::mutex g_mu;
std::vector<std::unique_ptr<Interned>>& interned() {
  static auto* all = new std::vector<std::unique_ptr<Interned>>;
  return *all;
}

const PairedRowsLayout* intern(const PairedRowsLayout& layout, const dnnl::memory::desc& desc) {
  std::lock_guard lock(g_mu);
  for (const auto& e : interned()) {
    if (e->layout == layout && e->desc == desc) return &e->layout;
  }
  interned().push_back(std::make_unique<Interned>(Interned{layout, desc}));
  return &interned().back()->layout;
}

const PairedRowsLayout* query_layout(int64_t batch, int64_t in, int64_t out, bool has_bias,
                                     FusedActivation activation) {
  if (!onednn::has_bf16() || activation == FusedActivation::gelu) return nullptr;
  using dims = dnnl::memory::dims;
  using tag = dnnl::memory::format_tag;
  const auto bf16 = dnnl::memory::data_type::bf16;
  const dnnl::memory::desc x_md(dims{batch, in}, bf16, tag::ab);
  const dnnl::memory::desc w_md(dims{in, out}, bf16, tag::any);
  const dnnl::memory::desc y_md(dims{batch, out}, bf16, tag::ab);
  try {
    const dnnl::matmul::desc desc =
        has_bias
            ? dnnl::matmul::desc(x_md, w_md, dnnl::memory::desc(dims{1, out}, bf16, tag::ab), y_md)
            : dnnl::matmul::desc(x_md, w_md, y_md);
    const dnnl::matmul::primitive_desc pd(desc, onednn::engine());
    const dnnl::memory::desc chosen = pd.weights_desc();
    const std::optional<PairedRowsLayout> layout = detail::paired_layout_of(chosen);
    if (!layout) return nullptr;
    return intern(*layout, chosen);
  } catch (const dnnl::error&) {
    return nullptr;
  }
}

}  // namespace

const PairedRowsLayout* bf16_kernel_layout(int64_t batch, int64_t in, int64_t out, bool has_bias,
                                           FusedActivation activation) {
  if (batch <= 0 || in <= 0 || out <= 0) return nullptr;
  // Asked on every forward pass: a per-thread memo keeps oneDNN out of the step.
  thread_local std::map<std::tuple<int64_t, int64_t, int64_t, bool, int>, const PairedRowsLayout*>
      memo;
  const auto key = std::make_tuple(batch, in, out, has_bias, static_cast<int>(activation));
  auto it = memo.find(key);
  if (it == memo.end()) {
    it = memo.emplace(key, query_layout(batch, in, out, has_bias, activation)).first;
  }
  return it->second;
}

namespace detail {

std::optional<PairedRowsLayout> paired_layout_of(const dnnl::memory::desc& md) {
  const dnnl_memory_desc_t& d = md.data;
  if (d.ndims != 2 || d.format_kind != dnnl_blocked || d.offset0 != 0 || d.extra.flags != 0)
    return std::nullopt;
  const dnnl_blocking_desc_t& b = d.format_desc.blocking;
  if (b.inner_nblks != 3 || b.inner_idxs[0] != 0 || b.inner_idxs[1] != 1 || b.inner_idxs[2] != 0 ||
      b.inner_blks[2] != 2)
    return std::nullopt;
  PairedRowsLayout l;
  l.rows = d.dims[0];
  l.cols = d.dims[1];
  l.row_block = b.inner_blks[0] * 2;
  l.col_block = b.inner_blks[1];
  l.row_tile_stride = b.strides[0];
  l.col_tile_stride = b.strides[1];
  l.size = static_cast<int64_t>(md.get_size() / 2);
  if (!l.valid() || d.padded_dims[0] % l.row_block != 0 || d.padded_dims[1] % l.col_block != 0)
    return std::nullopt;
  return l;
}

const dnnl::memory::desc& paired_kernel_desc(const PairedRowsLayout& layout) {
  std::lock_guard lock(g_mu);
  for (const auto& e : interned()) {
    if (&e->layout == &layout) return e->desc;
  }
  LOCKSTEP_CHECK_AS(Internal, false,
                    "paired_kernel_desc: the layout did not come from bf16_kernel_layout().");
  __builtin_unreachable();
}

}  // namespace detail
}  // namespace lockstep::ops
