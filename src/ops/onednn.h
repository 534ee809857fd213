#pragma once
// Internal to the ops layer (not installed): the shared oneDNN plumbing every oneDNN-backed kernel
// uses. Kept out of include/ so that users of Lockstep never see dnnl.hpp.
//
// Threading model: each replica thread runs single-threaded kernels on its own core, so the stream
// and the primitive cache are thread-local; the hot path takes no lock and, once a shape has been
// seen on a thread, creates nothing (a cached primitive keeps its dnnl::memory objects and its
// argument map; a call only swaps the data pointers in).
//
// Typical kernel:
//
//   onednn::Key key("matmul");
//   key.add(a.shape()).add(b.shape()).add(a.dtype()).add(transpose_a);
//   auto& p = onednn::cached<onednn::Primitive>(key, [&] {
//     auto pd = dnnl::matmul::primitive_desc(desc, attr, onednn::engine());
//     return onednn::Primitive(dnnl::matmul(pd), {{DNNL_ARG_SRC, pd.src_desc()}, ...});
//   });
//   p.execute({{DNNL_ARG_SRC, a.raw_data()}, {DNNL_ARG_WEIGHTS, b.raw_data()}, ...});
#include <oneapi/dnnl/dnnl.hpp>

#include <array>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>

#include "lockstep/core/dtype.h"
#include "lockstep/core/shape.h"

namespace lockstep::ops::onednn {

// The process's CPU engine (engines are thread-safe to share; primitives are created against it).
// Its creation hands Lockstep's ISA cap (lockstep/core/cpu_isa.h) to oneDNN first.
const dnnl::engine& engine();
// Hands the cap to oneDNN (dnnl::set_max_cpu_isa), once, before anything of oneDNN's dispatches on
// the ISA. engine() calls it; so must any oneDNN entry point that needs no engine (dnnl_sgemm).
void apply_isa_cap();
// oneDNN's effective ISA under the cap, by oneDNN's name ("AVX2", "AVX512_CORE_AMX").
std::string_view effective_isa_name();
// The implementation oneDNN picks for a float32 matmul here, as its verbose mode names it
// ("brg:avx512_core", "gemm:jit"): what the ISA above dispatches to.
std::string matmul_implementation();
// True when oneDNN has bfloat16 primitives on this CPU under the cap that compute with bfloat16
// instructions (AVX512_CORE_BF16, AVX512_CORE_AMX). Ops whose operands are bfloat16 compute in
// float32 kernels where it is false: operands widened exactly, results rounded to bfloat16, the
// policy's numerics kept.
bool has_bf16();
// This thread's in-order CPU stream.
dnnl::stream& stream();

// float32, bfloat16, int32 and uint8 map to oneDNN types; float64 and int64 have no oneDNN type on
// CPU (callers use plain loops for them): `has_data_type` is false and `data_type` throws Internal.
bool has_data_type(DType dtype);
dnnl::memory::data_type data_type(DType dtype);
dnnl::memory::dims dims(const Shape& shape);
// Dense row-major descriptor (format tag chosen from the rank: a, ab, abc, ...).
dnnl::memory::desc plain_desc(const dnnl::memory::dims& dims, DType dtype);
inline dnnl::memory::desc plain_desc(const Shape& shape, DType dtype) {
  return plain_desc(dims(shape), dtype);
}

// A fixed-size cache key (no allocation to build, hash or compare). The op name is hashed into the
// first word, so kernels in different files need no shared enum; then add every shape, dtype and
// flag that changes the primitive.
class Key {
 public:
  static constexpr int kCapacity = 40;
  explicit Key(std::string_view op_name);
  Key& add(int64_t value);
  Key& add(bool value) { return add(static_cast<int64_t>(value)); }
  Key& add(int value) { return add(static_cast<int64_t>(value)); }
  Key& add(float value);
  Key& add(DType dtype) { return add(static_cast<int64_t>(dtype) + 0x100); }
  Key& add(const Shape& shape);
  Key& add(const dnnl::memory::dims& dims);

  size_t hash() const;
  friend bool operator==(const Key& a, const Key& b);

 private:
  std::array<int64_t, kCapacity> words_{};
  int size_ = 0;
};

struct KeyHash {
  size_t operator()(const Key& k) const { return k.hash(); }
};

// Base of anything stored in the cache.
struct CacheEntry {
  virtual ~CacheEntry() = default;
};

// A primitive with its argument memories, bound to user buffers at each call by pointer swap.
class Primitive : public CacheEntry {
 public:
  Primitive(dnnl::primitive primitive,
            std::initializer_list<std::pair<int, dnnl::memory::desc>> arguments);
  // Sets each listed argument's data pointer, then runs on this thread's stream and waits.
  // Arguments that were not listed keep their previous pointers.
  void execute(std::initializer_list<std::pair<int, const void*>> buffers);

  dnnl::primitive& primitive() { return primitive_; }
  std::unordered_map<int, dnnl::memory>& arguments() { return args_; }

 private:
  dnnl::primitive primitive_;
  std::unordered_map<int, dnnl::memory> args_;
};

namespace detail {
CacheEntry* find(const Key& key);
CacheEntry* insert(const Key& key, std::unique_ptr<CacheEntry> entry);
}  // namespace detail

// The entry cached under `key` on this thread, created by `make()` (returning T or unique_ptr<T>)
// on the first call. The same key must always be used with the same T.
template <typename T, typename Make>
T& cached(const Key& key, Make&& make) {
  if (CacheEntry* e = detail::find(key)) return static_cast<T&>(*e);
  std::unique_ptr<CacheEntry> fresh;
  if constexpr (std::is_same_v<std::invoke_result_t<Make>, std::unique_ptr<T>>) {
    fresh = make();
  } else {
    fresh = std::make_unique<T>(make());
  }
  return static_cast<T&>(*detail::insert(key, std::move(fresh)));
}

}  // namespace lockstep::ops::onednn
