#include "comm_hook.h"

#include <string>
#include <vector>

#include "lockstep/core/bfloat16.h"
#include "lockstep/core/error.h"
#include "lockstep/distribute/background_reducer.h"
#include "lockstep/distribute/collective.h"

namespace lockstep::distribute {

namespace {

class Float32Hook final : public CommHook {
 public:
  DType wire_dtype() const override { return DType::float32; }
  void all_reduce(Communicator& cross, float* data, size_t n) override {
    cross.all_reduce(data, n, DType::float32, ReduceOp::SUM);
  }
  void enqueue(BackgroundReducer& reducer, float* data, size_t begin, size_t end) override {
    reducer.enqueue(data + begin, end - begin, DType::float32, ReduceOp::SUM);
  }
};

// Each worker's float32 sum rounded to bfloat16 (round to nearest even), summed on the wire, and
// widened back (collective.h: CommunicationOptions::gradient_dtype says what that costs).
class Bfloat16Hook final : public CommHook {
 public:
  DType wire_dtype() const override { return DType::bfloat16; }
  void all_reduce(Communicator& cross, float* data, size_t n) override {
    wire_.resize(n);
    narrow(data, 0, n);
    cross.all_reduce_compressed(wire_.data(), n);
    widen(data, n);
  }
  void reserve(size_t n) override { wire_.resize(n); }
  void enqueue(BackgroundReducer& reducer, float* data, size_t begin, size_t end) override {
    narrow(data, begin, end);
    reducer.enqueue_compressed(wire_.data() + begin, end - begin);
  }
  void finish(float* data, size_t n) override { widen(data, n); }

 private:
  void narrow(const float* data, size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) wire_[i] = bfloat16(data[i]);
  }
  void widen(float* data, size_t n) const {
    for (size_t i = 0; i < n; ++i) data[i] = static_cast<float>(wire_[i]);
  }
  std::vector<bfloat16> wire_;
};

}  // namespace

std::unique_ptr<CommHook> make_comm_hook(DType gradient_dtype) {
  switch (gradient_dtype) {
    case DType::float32:
      return std::make_unique<Float32Hook>();
    case DType::bfloat16:
      return std::make_unique<Bfloat16Hook>();
    default:
      throw InvalidArgument(
          "CommunicationOptions::gradient_dtype: expected float32 or bfloat16. "
          "Received: " +
          std::string(dtype_name(gradient_dtype)) + ".");
  }
}

}  // namespace lockstep::distribute
