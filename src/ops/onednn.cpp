#include "onednn.h"

#include <cstring>
#include <string>

#include "lockstep/core/check.h"
#include "lockstep/core/error.h"

namespace lockstep::ops::onednn {

const dnnl::engine& engine() {
  static const dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
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
