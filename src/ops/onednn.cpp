#include "onednn.h"

#include <cstring>
#include <string>

#include <mutex>

#include "lockstep/core/check.h"
#include "lockstep/core/cpu_isa.h"
#include "lockstep/core/error.h"

#if defined(__aarch64__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#include <sys/prctl.h>
#endif

namespace lockstep::ops::onednn {

void apply_isa_cap() {
  static std::once_flag once;
  std::call_once(once, [] {
    const CpuIsa cap = max_cpu_isa();  // throws on an unknown name, before oneDNN reads it
    if (cap == CpuIsa::all) return;
    static constexpr std::pair<CpuIsa, dnnl::cpu_isa> kMap[] = {
        {CpuIsa::sse41, dnnl::cpu_isa::sse41},
        {CpuIsa::avx, dnnl::cpu_isa::avx},
        {CpuIsa::avx2, dnnl::cpu_isa::avx2},
        {CpuIsa::avx2_vnni, dnnl::cpu_isa::avx2_vnni},
        {CpuIsa::avx512_core, dnnl::cpu_isa::avx512_core},
        {CpuIsa::avx512_core_vnni, dnnl::cpu_isa::avx512_core_vnni},
        {CpuIsa::avx512_core_bf16, dnnl::cpu_isa::avx512_core_bf16},
        {CpuIsa::avx512_core_amx, dnnl::cpu_isa::avx512_core_amx}};
    for (const auto& [ours, theirs] : kMap) {
      // Fails only when oneDNN has already fixed its ISA (it read ONEDNN_MAX_CPU_ISA itself, the
      // same value unless LOCKSTEP_MAX_CPU_ISA differs): nothing to do about it this late.
      if (ours == cap) (void)dnnl::set_max_cpu_isa(theirs);
    }
  });
}

const dnnl::engine& engine() {
  static const dnnl::engine e = [] {
    apply_isa_cap();
    return dnnl::engine(dnnl::engine::kind::cpu, 0);
  }();
  return e;
}

#if defined(__aarch64__)
namespace {
// oneDNN 2.6 dispatches on aarch64 by the hardware capabilities alone (its public ISA query and
// cap are x86's): Advanced SIMD, or SVE kernels of the core's vector length. Named as oneDNN
// names its aarch64 levels.
std::string aarch64_isa_name() {
  if ((getauxval(AT_HWCAP) & HWCAP_SVE) != 0) {
    const int vl = prctl(PR_SVE_GET_VL);
    if (vl > 0) return "SVE_" + std::to_string((vl & PR_SVE_VL_LEN_MASK) * 8);
  }
  return "ASIMD";
}
}  // namespace
#endif

std::string_view effective_isa_name() {
#if defined(__aarch64__)
  static const std::string name = aarch64_isa_name();
  return name;
#endif
  apply_isa_cap();
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41:
      return "SSE41";
    case dnnl::cpu_isa::avx:
      return "AVX";
    case dnnl::cpu_isa::avx2:
      return "AVX2";
    case dnnl::cpu_isa::avx2_vnni:
      return "AVX2_VNNI";
    case dnnl::cpu_isa::avx512_core:
      return "AVX512_CORE";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "AVX512_CORE_VNNI";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "AVX512_CORE_BF16";
    case dnnl::cpu_isa::avx512_core_amx:
      return "AVX512_CORE_AMX";
    default:
      return "below SSE41 (oneDNN's reference kernels)";
  }
}

bool has_bf16() {
  // bfloat16 instructions first: on AVX512_CORE without AVX512_BF16 oneDNN 2.6 still creates
  // bfloat16 primitives, but emulates them (its bfloat16 matmul ran at a fifth of the float32 one
  // there), so they count as absent. Then oneDNN itself is asked: a bfloat16 matmul, eltwise and
  // softmax must all exist.
  static const bool available = [] {
    const dnnl::cpu_isa isa = (apply_isa_cap(), dnnl::get_effective_cpu_isa());
    if (isa != dnnl::cpu_isa::avx512_core_bf16 && isa != dnnl::cpu_isa::avx512_core_amx) {
      return false;
    }
    try {
      using dims = dnnl::memory::dims;
      const dnnl::memory::desc md(dims{2, 2}, dnnl::memory::data_type::bf16,
                                  dnnl::memory::format_tag::ab);
      dnnl::matmul::primitive_desc mm(dnnl::matmul::desc(md, md, md), engine());
      dnnl::eltwise_forward::primitive_desc elt(
          dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training,
                                      dnnl::algorithm::eltwise_tanh, md, 0.0f, 0.0f),
          engine());
      dnnl::softmax_forward::primitive_desc sm(
          dnnl::softmax_forward::desc(dnnl::prop_kind::forward_inference, md, 1), engine());
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return available;
}

std::string matmul_implementation() {
  using dims = dnnl::memory::dims;
  const dnnl::memory::desc md(dims{64, 64}, dnnl::memory::data_type::f32,
                              dnnl::memory::format_tag::ab);
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(md, md, md), engine());
  return pd.impl_info_str();
}

dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

bool has_data_type(DType dtype) {
  return dtype == DType::float32 || dtype == DType::bfloat16 || dtype == DType::int32 ||
         dtype == DType::uint8;
}

dnnl::memory::data_type data_type(DType dtype) {
  using dt = dnnl::memory::data_type;
  switch (dtype) {
    case DType::float32:
      return dt::f32;
    case DType::bfloat16:
      return dt::bf16;
    case DType::int32:
      return dt::s32;
    case DType::uint8:
      return dt::u8;
    default:
      throw Internal("onednn::data_type: oneDNN has no CPU type for " +
                     std::string(dtype_name(dtype)) + "; use the loop kernel.");
  }
}

dnnl::memory::dims dims(const Shape& shape) {
  dnnl::memory::dims d(shape.dims().begin(), shape.dims().end());
  if (d.empty()) d.push_back(1);  // a scalar is a one-element vector to oneDNN
  return d;
}

dnnl::memory::desc plain_desc(const dnnl::memory::dims& dims, DType dtype) {
  using tag = dnnl::memory::format_tag;
  static constexpr tag kTags[] = {tag::a, tag::ab, tag::abc, tag::abcd, tag::abcde, tag::abcdef};
  LOCKSTEP_CHECK_AS(Internal, !dims.empty() && dims.size() <= std::size(kTags),
                    "onednn::plain_desc: rank ", dims.size(), " unsupported.");
  return dnnl::memory::desc(dims, data_type(dtype), kTags[dims.size() - 1]);
}

Key::Key(std::string_view op_name) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (char c : op_name) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  words_[0] = static_cast<int64_t>(h);
  size_ = 1;
}

Key& Key::add(int64_t value) {
  LOCKSTEP_CHECK_AS(Internal, size_ != kCapacity,
                    "onednn::Key: more than 40 words; raise kCapacity.");
  words_[static_cast<size_t>(size_++)] = value;
  return *this;
}

Key& Key::add(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return add(static_cast<int64_t>(bits));
}

Key& Key::add(const Shape& shape) {
  add(static_cast<int64_t>(shape.rank()) - 1000);  // separates [2,3]+[4] from [2]+[3,4]
  for (int64_t d : shape.dims()) add(d);
  return *this;
}

Key& Key::add(const dnnl::memory::dims& dims) {
  add(static_cast<int64_t>(dims.size()) - 1000);
  for (auto d : dims) add(static_cast<int64_t>(d));
  return *this;
}

size_t Key::hash() const {
  uint64_t h = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < size_; ++i) {
    h ^= static_cast<uint64_t>(words_[static_cast<size_t>(i)]) + 0x9e3779b97f4a7c15ull + (h << 6) +
         (h >> 2);
  }
  return static_cast<size_t>(h);
}

bool operator==(const Key& a, const Key& b) {
  return a.size_ == b.size_ && std::memcmp(a.words_.data(), b.words_.data(),
                                           static_cast<size_t>(a.size_) * sizeof(int64_t)) == 0;
}

Primitive::Primitive(dnnl::primitive primitive,
                     std::initializer_list<std::pair<int, dnnl::memory::desc>> arguments)
    : primitive_(std::move(primitive)) {
  for (const auto& [arg, desc] : arguments) {
    args_.emplace(arg, dnnl::memory(desc, engine(), DNNL_MEMORY_NONE));
  }
}

void Primitive::execute(std::initializer_list<std::pair<int, const void*>> buffers) {
  for (const auto& [arg, ptr] : buffers) {
    auto it = args_.find(arg);
    LOCKSTEP_CHECK_AS(Internal, it != args_.end(), "onednn::Primitive::execute: argument ", arg,
                      " was not declared when the primitive was cached.");
    it->second.set_data_handle(const_cast<void*>(ptr));
  }
  primitive_.execute(stream(), args_);
  stream().wait();
}

namespace {
using Cache = std::unordered_map<Key, std::unique_ptr<CacheEntry>, KeyHash>;
Cache& cache() {
  thread_local Cache c;
  return c;
}
}  // namespace

namespace detail {
CacheEntry* find(const Key& key) {
  auto& c = cache();
  auto it = c.find(key);
  return it == c.end() ? nullptr : it->second.get();
}
CacheEntry* insert(const Key& key, std::unique_ptr<CacheEntry> entry) {
  return cache().insert_or_assign(key, std::move(entry)).first->second.get();
}
}  // namespace detail

}  // namespace lockstep::ops::onednn
