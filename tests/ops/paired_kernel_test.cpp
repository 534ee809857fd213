// A kernel in pairs of rows (lockstep/core/paired_rows_layout.h): store_paired_rows puts every
// element where oneDNN's own reorder into its blocked weights layouts puts it (the reference: a
// reorder written by oneDNN, which runs on any CPU), padding left zero; and where oneDNN has
// bfloat16 kernels, a product with the kernel handed over in the layout it asks for gives the bits
// of the product with the kernel in its plain layout.
#include <gtest/gtest.h>

#include "testing/bf16_matmul_mode.h"
#include "testing/paired_layout.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "core/cpu_dispatch.h"
#include "lockstep/core/bfloat16.h"
#include "lockstep/core/cpu_isa.h"
#include "lockstep/core/error.h"
#include "lockstep/core/random.h"
#include "lockstep/ops/linear.h"
#include "ops/onednn.h"
#include "ops/paired_kernel.h"

namespace lockstep::ops {
namespace {

using tag = dnnl::memory::format_tag;

#if defined(__x86_64__)
// The build whose masked 16-bit stores write sixteen values at a time.
LOCKSTEP_TARGET_X86_64_V4 void store_v4(const PairedRowsLayout& layout, uint16_t* dst,
                                        int64_t begin, const uint16_t* values, int64_t count) {
  store_paired_rows<16>(layout, dst, begin, values, count);
}
#endif

// rows x cols bfloat16 bits, all nonzero (a zero would hide a value left in the padding).
std::vector<uint16_t> sample(int64_t rows, int64_t cols) {
  std::vector<uint16_t> v(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint16_t>(0x3f80u + (i * 37u) % 0x3fu);
  return v;
}

// oneDNN's reorder of the plain matrix into `format`, padding included.
std::vector<uint16_t> reordered(const std::vector<uint16_t>& plain, int64_t rows, int64_t cols,
                                const dnnl::memory::desc& blocked) {
  const dnnl::engine& engine = onednn::engine();
  const dnnl::memory::desc plain_md({rows, cols}, dnnl::memory::data_type::bf16, tag::ab);
  std::vector<uint16_t> out(blocked.get_size() / 2, 0xffffu);
  dnnl::memory src(plain_md, engine, const_cast<uint16_t*>(plain.data()));
  dnnl::memory dst(blocked, engine, out.data());
  dnnl::reorder(src, dst).execute(onednn::stream(), src, dst);
  onednn::stream().wait();
  return out;
}

TEST(PairedKernel, StoresEveryElementWhereOneDnnsReorderPutsIt) {
  const bool v4 = loop_isa() == LoopIsa::x86_64_v4;
  for (const tag format : {tag::BA16a64b2a, tag::BA16a32b2a, tag::BA16a16b2a}) {
    for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{
             {784, 128}, {50, 20}, {7, 1}, {33, 130}, {64, 64}}) {
      SCOPED_TRACE(::testing::Message()
                   << "tag " << static_cast<int>(format) << ", " << rows << " x " << cols);
      const dnnl::memory::desc md({rows, cols}, dnnl::memory::data_type::bf16, format);
      const std::optional<PairedRowsLayout> layout = detail::paired_layout_of(md);
      ASSERT_TRUE(layout.has_value());
      ASSERT_TRUE(layout->valid());
      EXPECT_EQ(layout->rows, rows);
      EXPECT_EQ(layout->cols, cols);
      const std::vector<uint16_t> plain = sample(rows, cols);
      const std::vector<uint16_t> want = reordered(plain, rows, cols, md);
      ASSERT_EQ(static_cast<int64_t>(want.size()), layout->size);
      // In runs of 1 to 97 elements from any element on (the update's spans start anywhere), with
      // each build of the store.
      for (int build = 0; build < (v4 ? 2 : 1); ++build) {
        std::vector<uint16_t> got(want.size(), 0);
        Generator gen(static_cast<uint64_t>(rows * 1000 + cols));
        for (int64_t e = 0; e < rows * cols;) {
          const int64_t run =
              std::min<int64_t>(rows * cols - e, 1 + static_cast<int64_t>(gen.uniform_int(97)));
#if defined(__x86_64__)
          if (build == 1) {
            store_v4(*layout, got.data(), e, plain.data() + e, run);
            e += run;
            continue;
          }
#endif
          store_paired_rows<0>(*layout, got.data(), e, plain.data() + e, run);
          e += run;
        }
        ASSERT_EQ(got, want) << (build == 1 ? "x86-64-v4 store" : "one value at a time");
      }
      // And copy_paired_rows moves exactly a range.
      std::vector<uint16_t> copy(want.size(), 0);
      const int64_t from = rows * cols / 3, count = rows * cols / 2 + 1;
      copy_paired_rows(*layout, want.data(), copy.data(), from, count);
      for (int64_t e = 0; e < rows * cols; ++e) {
        const int64_t at = layout->offset(e / cols, e % cols);
        ASSERT_EQ(copy[static_cast<size_t>(at)],
                  e >= from && e < from + count ? plain[static_cast<size_t>(e)] : 0)
            << "element " << e;
      }
    }
  }
}

TEST(PairedKernel, LayoutsOtherThanPairsOfRowsAreRefused) {
  for (const tag format : {tag::ab, tag::ba, tag::AB16b16a, tag::BA16a16b}) {
    const dnnl::memory::desc md({64, 64}, dnnl::memory::data_type::bf16, format);
    EXPECT_FALSE(detail::paired_layout_of(md).has_value()) << static_cast<int>(format);
  }
}

Tensor bf16_sample(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  return gen.uniform(shape, -1.0, 1.0).to(DType::bfloat16);
}

// The kernel's bits in `layout`, through the store the optimizers use.
Tensor paired(const Tensor& kernel, const PairedRowsLayout& layout) {
  Tensor out = Tensor::zeros({layout.size}, DType::bfloat16);
  store_paired_rows<0>(layout, reinterpret_cast<uint16_t*>(out.data<bfloat16>()), 0,
                       reinterpret_cast<const uint16_t*>(kernel.data<bfloat16>()),
                       kernel.num_elements());
  return out;
}

TEST(PairedKernel, AProductWithThePairedKernelHasThePlainProductsBits) {
  // The plain product on oneDNN's bfloat16 kernels too: measured, a busy machine could pick the
  // float32 form for a shape, whose bits differ.
  testing::Bf16MatmulModeGuard mode(Bf16MatmulMode::bfloat16_kernels);
  struct Case {
    int64_t batch, in, out;
    bool bias;
    FusedActivation act;
  };
  for (const Case& c : {Case{128, 784, 128, true, FusedActivation::relu},
                        Case{8, 784, 128, true, FusedActivation::relu},
                        Case{33, 50, 20, false, FusedActivation::none},
                        Case{16, 64, 48, true, FusedActivation::tanh}}) {
    SCOPED_TRACE(::testing::Message() << c.batch << " x " << c.in << " x " << c.out);
    const PairedRowsLayout* layout = bf16_kernel_layout(c.batch, c.in, c.out, c.bias, c.act);
    if (!onednn::has_bf16()) {
      // No bfloat16 kernels: nothing to hand over (the layer multiplies the plain copy).
      EXPECT_EQ(layout, nullptr);
      continue;
    }
    ASSERT_NE(layout, nullptr) << "oneDNN " << onednn::effective_isa_name();
    EXPECT_EQ(layout, bf16_kernel_layout(c.batch, c.in, c.out, c.bias, c.act)) << "interned";
    const Tensor x = bf16_sample({c.batch, c.in}, 1);
    const Tensor kernel = bf16_sample({c.in, c.out}, 2);
    const Tensor bias = c.bias ? bf16_sample({c.out}, 3) : Tensor();
    Tensor want({c.batch, c.out}, DType::bfloat16), got({c.batch, c.out}, DType::bfloat16);
    linear_into(x, kernel, bias, c.act, want);
    linear_paired_into(x, paired(kernel, *layout), *layout, bias, c.act, got);
    const auto* w = reinterpret_cast<const uint16_t*>(want.data<bfloat16>());
    const auto* g = reinterpret_cast<const uint16_t*>(got.data<bfloat16>());
    for (int64_t i = 0; i < want.num_elements(); ++i) ASSERT_EQ(g[i], w[i]) << "element " << i;
  }
}

TEST(PairedKernel, AKernelOfAnotherSizeIsRefusedNamingBoth) {
  const PairedRowsLayout layout = lockstep::testing::tiled_paired_layout(64, 16, 32, 16);
  const Tensor x = bf16_sample({4, 64}, 1);
  Tensor y({4, 16}, DType::bfloat16);
  try {
    linear_paired_into(x, Tensor::zeros({64 * 15}, DType::bfloat16), layout, Tensor(),
                       FusedActivation::none, y);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("1024 elements"), std::string::npos) << what;
    EXPECT_NE(what.find("[960]"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace lockstep::ops
