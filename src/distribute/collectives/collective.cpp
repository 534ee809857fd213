#include "lockstep/distribute/collective.h"

#include <string>

#include "lockstep/core/check.h"
#include "lockstep/core/error.h"

namespace lockstep::distribute {

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::SUM:
      return "SUM";
    case ReduceOp::MEAN:
      return "MEAN";
    case ReduceOp::MAX:
      return "MAX";
  }
  return "?";
}

BlockRange block_range(size_t count, int size, int rank) {
  LOCKSTEP_CHECK(size >= 1 && rank >= 0 && rank < size,
                 "block_range: expected 0 <= rank < size. Received: rank=", rank, ", size=", size);
  // 128-bit products: count * rank must not overflow for any size_t count.
  const auto n = static_cast<unsigned __int128>(count);
  const auto s = static_cast<unsigned __int128>(size);
  return {static_cast<size_t>(n * static_cast<unsigned>(rank) / s),
          static_cast<size_t>(n * static_cast<unsigned>(rank + 1) / s)};
}

Communicator::Communicator(const CommunicationOptions& options) : options_(options) {
  LOCKSTEP_CHECK(options.timeout_seconds >= 0,
                 "CommunicationOptions: expected timeout_seconds >= 0 (0 = no timeout). Received: "
                 "timeout_seconds=",
                 options.timeout_seconds);
}

namespace {

void check_dtype(const char* what, DType dtype) {
  switch (dtype) {
    case DType::float32:
    case DType::bfloat16:
    case DType::float64:
    case DType::int32:
    case DType::int64:
    case DType::uint8:
      return;
  }
  throw InvalidArgument(std::string(what) + ": unsupported dtype " +
                        std::to_string(static_cast<int>(dtype)));
}

void check_op(const char* what, ReduceOp op) {
  LOCKSTEP_CHECK(op == ReduceOp::SUM || op == ReduceOp::MEAN || op == ReduceOp::MAX, what,
                 ": unknown ReduceOp ", static_cast<int>(op));
}

void check_buffer(const char* what, const char* name, const void* p, size_t count) {
  LOCKSTEP_CHECK(p != nullptr || count == 0, what, ": ", name, " is null but count is ", count);
}

}  // namespace

void Communicator::begin(const char* name, size_t count, DType dtype, int op, int root) {
  ++sequence_;
  current_name_ = name;
  current_count_ = count;
  current_dtype_ = dtype;
  current_op_ = op;
  current_root_ = root;
}

std::string Communicator::describe_current() const {
  std::string s = std::string(current_name_) + " #" + std::to_string(sequence_);
  if (std::string_view(current_name_) == "barrier") return s;
  s += " (" + std::string(dtype_name(current_dtype_)) + "[" + std::to_string(current_count_) + "]";
  if (current_op_ >= 0) s += ", " + std::string(reduce_op_name(static_cast<ReduceOp>(current_op_)));
  if (current_root_ >= 0) s += ", root " + std::to_string(current_root_);
  return s + ")";
}

void Communicator::all_reduce(void* buf, size_t count, DType dtype, ReduceOp op) {
  check_dtype("all_reduce", dtype);
  check_op("all_reduce", op);
  check_buffer("all_reduce", "buf", buf, count);
  begin("all_reduce", count, dtype, static_cast<int>(op), -1);
  do_all_reduce(buf, count, dtype, op);
}

void Communicator::all_reduce_compressed(bfloat16* buf, size_t count) {
  check_buffer("all_reduce_compressed", "buf", buf, count);
  begin("all_reduce_compressed", count, DType::bfloat16, static_cast<int>(ReduceOp::SUM), -1);
  do_all_reduce_compressed(buf, count);
}

void Communicator::reduce_scatter(const void* send, void* recv, size_t count, DType dtype,
                                  ReduceOp op) {
  check_dtype("reduce_scatter", dtype);
  check_op("reduce_scatter", op);
  check_buffer("reduce_scatter", "send", send, count);
  check_buffer("reduce_scatter", "recv", recv, block_range(count, size(), rank()).size());
  begin("reduce_scatter", count, dtype, static_cast<int>(op), -1);
  do_reduce_scatter(send, recv, count, dtype, op);
}

void Communicator::all_gather(const void* send, void* recv, size_t count_per_rank, DType dtype) {
  check_dtype("all_gather", dtype);
  check_buffer("all_gather", "send", send, count_per_rank);
  check_buffer("all_gather", "recv", recv, count_per_rank);
  begin("all_gather", count_per_rank, dtype, -1, -1);
  do_all_gather(send, recv, count_per_rank, dtype);
}

void Communicator::broadcast(void* buf, size_t count, DType dtype, int root) {
  check_dtype("broadcast", dtype);
  check_buffer("broadcast", "buf", buf, count);
  LOCKSTEP_CHECK(root >= 0 && root < size(), "broadcast: expected 0 <= root < ", size(),
                 ". Received: root=", root);
  begin("broadcast", count, dtype, -1, root);
  do_broadcast(buf, count, dtype, root);
}

void Communicator::barrier() {
  begin("barrier", 0, DType::uint8, -1, -1);
  do_barrier();
}

void Communicator::all_reduce(const Tensor& tensor, ReduceOp op) {
  LOCKSTEP_CHECK(tensor.defined(), "all_reduce: the tensor is undefined");
  all_reduce(tensor.raw_data(), static_cast<size_t>(tensor.num_elements()), tensor.dtype(), op);
}

void Communicator::reduce_scatter(const Tensor& send, const Tensor& recv, ReduceOp op) {
  LOCKSTEP_CHECK(send.defined() && recv.defined(),
                 "reduce_scatter: send and recv must be defined tensors");
  const size_t count = static_cast<size_t>(send.num_elements());
  const BlockRange block = block_range(count, size(), rank());
  LOCKSTEP_CHECK(
      !(recv.dtype() != send.dtype() || static_cast<size_t>(recv.num_elements()) != block.size()),
      "reduce_scatter: rank ", rank(), " of ", size(), " expected recv of ",
      dtype_name(send.dtype()), " with ", block.size(), " elements (block [", block.begin, ", ",
      block.end, ") of send ", send.describe(), "). Received: recv ", recv.describe());
  reduce_scatter(send.raw_data(), recv.raw_data(), count, send.dtype(), op);
}

void Communicator::all_gather(const Tensor& send, const Tensor& recv) {
  LOCKSTEP_CHECK(send.defined() && recv.defined(),
                 "all_gather: send and recv must be defined tensors");
  const size_t count = static_cast<size_t>(send.num_elements());
  LOCKSTEP_CHECK(recv.dtype() == send.dtype() && static_cast<size_t>(recv.num_elements()) ==
                                                     count * static_cast<size_t>(size()),
                 "all_gather: expected recv of ", dtype_name(send.dtype()), " with ", size(), " x ",
                 count, " elements. Received: send ", send.describe(), ", recv ", recv.describe());
  all_gather(send.raw_data(), recv.raw_data(), count, send.dtype());
}

void Communicator::broadcast(const Tensor& tensor, int root) {
  LOCKSTEP_CHECK(tensor.defined(), "broadcast: the tensor is undefined");
  broadcast(tensor.raw_data(), static_cast<size_t>(tensor.num_elements()), tensor.dtype(), root);
}

}  // namespace lockstep::distribute
