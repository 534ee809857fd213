#include "lockstep/core/tensor.h"
#include "lockstep/core/check.h"

#include <atomic>
#include <cmath>
#include <cstring>
#include <sstream>
#include <utility>

namespace lockstep {

uint64_t next_tensor_id() {
  // Ids are handed out in per-thread blocks so that replica threads do not contend on one counter.
  static std::atomic<uint64_t> next_block{1};
  constexpr uint64_t kBlock = 1 << 16;
  thread_local uint64_t next = 0, end = 0;
  if (next == end) {
    next = next_block.fetch_add(1, std::memory_order_relaxed) * kBlock;
    end = next + kBlock;
  }
  return next++;
}

Tensor::Tensor(const Shape& shape, DType dtype)
    : storage_(Storage::allocate(static_cast<size_t>(shape.num_elements()) * dtype_size(dtype))),
      shape_(shape),
      dtype_(dtype),
      id_(next_tensor_id()) {}

Tensor::Tensor(const Tensor& o)
    : storage_(o.storage_), offset_(o.offset_), shape_(o.shape_), dtype_(o.dtype_), id_(o.id_) {
  if (storage_) storage_->retain();
}

Tensor::Tensor(Tensor&& o) noexcept
    : storage_(o.storage_), offset_(o.offset_), shape_(o.shape_), dtype_(o.dtype_), id_(o.id_) {
  o.storage_ = nullptr;
  o.id_ = 0;
}

Tensor& Tensor::operator=(const Tensor& o) {
  if (this != &o) {
    if (o.storage_) o.storage_->retain();
    reset();
    storage_ = o.storage_;
    offset_ = o.offset_;
    shape_ = o.shape_;
    dtype_ = o.dtype_;
    id_ = o.id_;
  }
  return *this;
}

Tensor& Tensor::operator=(Tensor&& o) noexcept {
  if (this != &o) {
    reset();
    storage_ = o.storage_;
    offset_ = o.offset_;
    shape_ = o.shape_;
    dtype_ = o.dtype_;
    id_ = o.id_;
    o.storage_ = nullptr;
    o.id_ = 0;
  }
  return *this;
}

void Tensor::reset() {
  if (storage_) storage_->release();
  storage_ = nullptr;
}

void Tensor::swap_storage(Tensor& other) {
  LOCKSTEP_CHECK(shape_ == other.shape_ && dtype_ == other.dtype_,
                 "Tensor::swap_storage: expected tensors of one shape and dtype. Received: ",
                 describe(), " and ", other.describe(), ".");
  std::swap(storage_, other.storage_);
  std::swap(offset_, other.offset_);
}

void* Tensor::raw_data() const {
  LOCKSTEP_CHECK_AS(FailedPrecondition, storage_,
                    "Tensor: access to the data of an undefined tensor.");
  return static_cast<char*>(storage_->data()) + offset_;
}

void Tensor::check_dtype(DType expected, const char* what) const {
  LOCKSTEP_CHECK(dtype_ == expected, what, ": expected dtype ", dtype_name(expected),
                 ". Received: ", describe(), ".");
}

namespace {
template <typename F>
void dispatch(DType d, F&& f) {
  switch (d) {
    case DType::float32:
      f(float{});
      break;
    case DType::bfloat16:
      f(bfloat16{});
      break;
    case DType::float64:
      f(double{});
      break;
    case DType::int32:
      f(int32_t{});
      break;
    case DType::int64:
      f(int64_t{});
      break;
    case DType::uint8:
      f(uint8_t{});
      break;
  }
}
template <typename T>
T from_double(double v) {
  if constexpr (std::is_same_v<T, bfloat16>) {
    return bfloat16(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}
template <typename T>
double to_double(T v) {
  if constexpr (std::is_same_v<T, bfloat16>) {
    return static_cast<double>(static_cast<float>(v));
  } else {
    return static_cast<double>(v);
  }
}
}  // namespace

Tensor Tensor::zeros(const Shape& shape, DType dtype) {
  Tensor t(shape, dtype);
  std::memset(t.raw_data(), 0, t.nbytes());
  return t;
}

Tensor Tensor::ones(const Shape& shape, DType dtype) {
  return full(shape, 1.0, dtype);
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype) {
  Tensor t(shape, dtype);
  dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    T v = from_double<T>(value);
    T* d = static_cast<T*>(t.raw_data());
    for (int64_t i = 0, n = t.num_elements(); i < n; ++i) d[i] = v;
  });
  return t;
}

Tensor Tensor::reshape(std::initializer_list<int64_t> dims) const {
  int infer = -1;
  int64_t known = 1;
  int i = 0;
  for (int64_t d : dims) {
    if (d == -1) {
      LOCKSTEP_CHECK(infer < 0, "reshape: only one dimension can be -1.");
      infer = i;
    } else {
      known *= d;
    }
    ++i;
  }
  Shape s;
  for (int64_t d : dims) {
    if (d != -1) {
      s.push_back(d);
    } else {
      LOCKSTEP_CHECK(known != 0 && num_elements() % known == 0,
                     "reshape: cannot infer the -1 dimension viewing ", describe(), " with ", known,
                     " elements per slice.");
      s.push_back(num_elements() / known);
    }
  }
  return reshape(s);
}

Tensor Tensor::reshape(const Shape& shape) const {
  int64_t known = shape.num_elements();
  LOCKSTEP_CHECK(known == num_elements(), "reshape: cannot view ", describe(), " (", num_elements(),
                 " elements) as shape ", shape, " (", known, " elements).");
  Tensor v(*this);
  v.shape_ = shape;
  v.id_ = next_tensor_id();
  return v;
}

Tensor Tensor::slice(int64_t begin, int64_t end) const {
  LOCKSTEP_CHECK(rank() != 0, "slice: cannot slice a scalar ", describe(), ".");
  int64_t n = shape_[0];
  LOCKSTEP_CHECK(begin >= 0 && end >= begin && end <= n, "slice: rows [", begin, ", ", end,
                 ") are out of range for ", describe(), ".");
  Tensor v(*this);
  int64_t row_elems = n ? num_elements() / n : 0;
  v.offset_ += static_cast<size_t>(begin * row_elems) * dtype_size(dtype_);
  v.shape_ = shape_.with_dim(0, end - begin);
  v.id_ = next_tensor_id();
  return v;
}

Tensor Tensor::view_as(DType dtype, const Shape& shape) const {
  const size_t bytes = static_cast<size_t>(shape.num_elements()) * dtype_size(dtype);
  LOCKSTEP_CHECK(defined() && bytes <= nbytes(), "view_as: ", shape, " ", dtype,
                 " does not fit in the ", nbytes(), " bytes of ", describe(), ".");
  Tensor v(*this);
  v.shape_ = shape;
  v.dtype_ = dtype;
  v.id_ = next_tensor_id();
  return v;
}

Tensor Tensor::row(int64_t index) const {
  Tensor v = slice(index, index + 1);
  v.shape_ = v.shape_.without(0);
  return v;
}

Tensor Tensor::clone() const {
  Tensor t(shape_, dtype_);
  std::memcpy(t.raw_data(), raw_data(), nbytes());
  return t;
}

void Tensor::copy_from(const Tensor& src) const {
  LOCKSTEP_CHECK(src.shape_ == shape_ && src.dtype_ == dtype_, "copy_from: destination ",
                 describe(), " and source ", src.describe(), " differ in shape or dtype.");
  std::memmove(raw_data(), src.raw_data(), nbytes());
  storage_->set_holds_bfloat16_values(false);
  storage_->set_transposed_copy({});
}

namespace {
size_t transpose_room_offset(int64_t rows, int64_t cols, size_t elem_bytes) {
  const size_t bytes = static_cast<size_t>(rows * cols) * elem_bytes;
  return (bytes + Storage::kAlignment - 1) / Storage::kAlignment * Storage::kAlignment;
}
}  // namespace

Tensor Tensor::with_room_for_transpose(int64_t rows, int64_t cols, DType dtype) {
  LOCKSTEP_CHECK(rows >= 0 && cols >= 0,
                 "with_room_for_transpose: expected a non-negative shape. "
                 "Received: [",
                 rows, ", ", cols, "].");
  const size_t elem = dtype_size(dtype);
  const size_t room = transpose_room_offset(rows, cols, elem);
  Tensor block(Shape{static_cast<int64_t>((room + static_cast<size_t>(rows * cols) * elem))},
               DType::uint8);
  return block.view_as(dtype, Shape{rows, cols});
}

Tensor Tensor::transpose_room() const {
  const size_t elem = dtype_size(dtype_);
  const size_t need = rank() == 2 ? transpose_room_offset(dim(0), dim(1), elem) + nbytes() : 0;
  LOCKSTEP_CHECK(storage_ != nullptr && rank() == 2 && offset_ == 0 && storage_->nbytes() >= need,
                 "transpose_room: expected a matrix made by with_room_for_transpose. Received: ",
                 describe(), ".");
  Tensor v(*this);
  v.offset_ = transpose_room_offset(dim(0), dim(1), elem);
  v.shape_ = Shape{dim(1), dim(0)};
  v.id_ = next_tensor_id();
  return v;
}

void Tensor::mark_transposed_copy() const {
  (void)transpose_room();  // checks that the room exists
  storage_->set_transposed_copy({dim(0), dim(1), dtype_size(dtype_)});
}

Tensor Tensor::transposed_copy() const {
  if (storage_ == nullptr || rank() != 2 || offset_ != 0) return Tensor();
  const Storage::TransposedCopy want{dim(0), dim(1), dtype_size(dtype_)};
  if (want.rows == 0 || !(storage_->transposed_copy() == want)) return Tensor();
  return transpose_room();
}

void Tensor::clear_transposed_copy() const {
  if (storage_ != nullptr) storage_->set_transposed_copy({});
}

bool Tensor::holds_bfloat16_values() const {
  return storage_ != nullptr && dtype_ == DType::float32 && storage_->holds_bfloat16_values();
}

void Tensor::clear_bfloat16_values() const {
  if (storage_ != nullptr) storage_->set_holds_bfloat16_values(false);
}

void Tensor::mark_bfloat16_values() const {
  LOCKSTEP_CHECK(storage_ != nullptr && dtype_ == DType::float32,
                 "mark_bfloat16_values: expected a defined float32 tensor. Received: ", describe(),
                 ".");
  storage_->set_holds_bfloat16_values(true);
}

Tensor Tensor::to(DType dtype) const {
  Tensor out(shape_, dtype);
  int64_t n = num_elements();
  if (dtype == dtype_) {
    std::memcpy(out.raw_data(), raw_data(), nbytes());
  } else if (dtype_ == DType::float32 && dtype == DType::bfloat16) {
    float_to_bfloat16(data<float>(), out.data<bfloat16>(), static_cast<size_t>(n));
  } else if (dtype_ == DType::bfloat16 && dtype == DType::float32) {
    bfloat16_to_float(data<bfloat16>(), out.data<float>(), static_cast<size_t>(n));
  } else {
    dispatch(dtype_, [&](auto stag) {
      using S = decltype(stag);
      const S* s = static_cast<const S*>(raw_data());
      dispatch(dtype, [&](auto dtag) {
        using D = decltype(dtag);
        D* d = static_cast<D*>(out.raw_data());
        for (int64_t i = 0; i < n; ++i) d[i] = from_double<D>(to_double(s[i]));
      });
    });
  }
  return out;
}

double Tensor::at(int64_t i) const {
  LOCKSTEP_CHECK(i >= 0 && i < num_elements(), "at: flat index ", i, " out of range for ",
                 describe(), ".");
  double r = 0;
  dispatch(dtype_, [&](auto tag) {
    using T = decltype(tag);
    r = to_double(static_cast<const T*>(raw_data())[i]);
  });
  return r;
}

double Tensor::item() const {
  LOCKSTEP_CHECK(num_elements() == 1,
                 "item: expected a tensor with one element. Received: ", describe(), ".");
  return at(0);
}

std::string Tensor::describe() const {
  if (!defined()) return "undefined tensor";
  return std::string(dtype_name(dtype_)) + shape_.to_string();
}

std::string Tensor::to_string(int64_t max_elements) const {
  std::ostringstream os;
  os << "Tensor(shape=" << shape_.to_string() << ", dtype=" << dtype_name(dtype_) << ", [";
  if (defined()) {
    int64_t n = num_elements();
    for (int64_t i = 0; i < n && i < max_elements; ++i) os << (i ? ", " : "") << at(i);
    if (n > max_elements) os << ", ...";
  }
  os << "])";
  return os.str();
}

}  // namespace lockstep
