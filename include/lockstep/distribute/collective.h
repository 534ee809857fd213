#pragma once
// Collective communication: the one small interface every strategy and gradient synchroniser
// talks to. A `Communicator` is one endpoint (one rank) of a group of `size()` ranks; every
// collective must be called by every rank of the group, in the same order, with the same count,
// dtype, op and root (as in MPI). Two implementations are chosen at run time:
//
//   * SharedMemoryGroup (shared_memory_group.h): ranks are threads of one process; collectives read
//     the other ranks' buffers directly.
//   * MpiCommunicator (from MpiContext::world(), mpi_context.h): ranks are processes (one or many
//     hosts) over MPI.
//
// The core is type-erased (raw pointer + element count + DType), like c10d and xgboost's collective
// layer; the Tensor and span overloads below are thin, non-virtual conveniences over it.
//
// Semantics shared by both implementations:
//
//   * Supported dtypes: float32, bfloat16, float64, int32, int64 for every collective; uint8 too
//     (reductions on uint8 wrap modulo 256).
//   * SUM of float32 / float64 is computed in the element type. bfloat16 is summed in float32 and
//     rounded to bfloat16 once at the end (round to nearest even), so N replicas lose no more
//     precision than one. Integer sums wrap (two's complement) instead of being undefined.
//   * MEAN = SUM / size(), computed after the sum: floats divide (x / n, not x * (1/n));
//     integers divide with truncation toward zero (as C++ `/`).
//   * MAX is exact for every dtype. NaN handling follows the implementation's comparison and is
//     unspecified.
//   * Determinism: the result does not depend on thread timing or message arrival order. The
//     shared-memory group sums element i as ((x_0 + x_1) + x_2) + ... + x_{n-1} in rank order.
//     MPI relies on Open MPI choosing the same reduction algorithm for the same process count and
//     message size (see docs/distributed.md); results are bit-identical run to run, but the two
//     implementations may differ from each other in the last bit for floats.
//   * Timeouts: with CommunicationOptions::timeout_seconds > 0 a collective that cannot complete
//     in time throws DeadlineExceeded (a rank did not arrive) or Unavailable (a peer is known to
//     be gone); the message names the missing rank(s) and the collective ("all_reduce #57").
//     After such an error the group is broken: every later call on any of its endpoints throws
//     the same error. Build a new group to continue; across processes, end the job with
//     abort_job() (failure.h).
//   * Each endpoint is used by one thread at a time (its replica); different endpoints of a
//     shared-memory group are used concurrently by different threads.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "lockstep/core/bfloat16.h"
#include "lockstep/core/dtype.h"
#include "lockstep/core/tensor.h"

namespace lockstep::distribute {

// The names of tf.distribute.ReduceOp (plus MAX, used for metrics such as "any replica saw NaN").
enum class ReduceOp { SUM, MEAN, MAX };
std::string_view reduce_op_name(ReduceOp op);  // "SUM", "MEAN", "MAX"

struct CommunicationOptions {
  // Seconds a collective may wait for the other ranks; 0 waits forever.
  double timeout_seconds = 0;
  // Upper bound on the bytes moved by one underlying transfer (MPI splits larger collectives into
  // packs of this size, as tf.distribute's bytes_per_pack); 0 means no splitting beyond what the
  // transport requires. The shared-memory group ignores it: it does not copy through buffers.
  size_t bytes_per_pack = 0;
  // The dtype training gradients cross workers in (Keras' MultiWorkerMirroredStrategy summing
  // gradients; within a process the replicas always sum in float32). bfloat16 halves the bytes on
  // the wire: each worker's float32 sum is rounded to bfloat16 (8 bits of mantissa, relative error
  // up to 2^-9 per element), the transport sums in float32 and rounds the total once more, and the
  // result is widened back to float32 for the optimizer. Those roundings are noise of the order of
  // bfloat16 compute itself, but they are not averaged away (unlike batch noise) and make the
  // result depend on the worker count; float32 (the default) keeps the sum exact to float32.
  DType gradient_dtype = DType::float32;
};

// The block of `count` elements owned by `rank` in reduce_scatter (and the partition used by
// sharded optimizer updates): [begin, end) with begin = floor(rank * count / size) and
// end = floor((rank + 1) * count / size). Blocks are contiguous, cover [0, count) exactly once, in
// rank order, and their sizes differ by at most one element (larger blocks go to higher ranks;
// when count < size some blocks are empty). Example: count 13, size 4 -> [0,3) [3,6) [6,9) [9,13).
struct BlockRange {
  size_t begin = 0;
  size_t end = 0;
  size_t size() const { return end - begin; }
  friend bool operator==(const BlockRange&, const BlockRange&) = default;
};
BlockRange block_range(size_t count, int size, int rank);

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "shared_memory" or "mpi", for logs and error messages.
  virtual std::string_view backend() const = 0;
  const CommunicationOptions& options() const { return options_; }

  // ---- Type-erased core. Every rank calls each of these with the same arguments. ----

  // In place: buf[i] <- op over ranks r of buf_r[i], for i in [0, count).
  void all_reduce(void* buf, size_t count, DType dtype, ReduceOp op);
  // `send` holds `count` elements on every rank; rank r receives in `recv` the reduced elements
  // block_range(count, size(), r) (recv holds block_range(...).size() elements). `send` and `recv`
  // must not overlap.
  void reduce_scatter(const void* send, void* recv, size_t count, DType dtype, ReduceOp op);
  // Every rank contributes `count_per_rank` elements; recv (size() * count_per_rank elements)
  // receives rank 0's, then rank 1's, ... on every rank. `send` may alias recv's own block.
  void all_gather(const void* send, void* recv, size_t count_per_rank, DType dtype);
  // buf on every rank <- buf on `root`.
  void broadcast(void* buf, size_t count, DType dtype, int root);
  // Returns once every rank has called barrier().
  void barrier();

  // Sums bfloat16 values with bfloat16 on the wire — gradient compression, as DDP's
  // bf16_compress_hook and Horovod's compression: half the bytes of a float32 all-reduce. Each
  // partial sum the transport forms is computed in float32 and rounded to bfloat16, so with more
  // than two ranks a sum can carry up to size() - 1 roundings instead of all_reduce's one (with
  // two ranks there is one addition: the result equals all_reduce's bit for bit). Deterministic
  // run to run. The shared-memory group has no wire and just calls all_reduce (rounds once).
  void all_reduce_compressed(bfloat16* buf, size_t count);

  // ---- Typed conveniences (non-virtual). Tensors are handles: the elements are written even
  // through a const handle, so views such as `t.slice(a, b)` can be passed directly. ----

  void all_reduce(const Tensor& tensor, ReduceOp op);
  // `recv` must have block_range(send.num_elements(), size(), rank()).size() elements.
  void reduce_scatter(const Tensor& send, const Tensor& recv, ReduceOp op);
  // `recv` must have size() * send.num_elements() elements.
  void all_gather(const Tensor& send, const Tensor& recv);
  void broadcast(const Tensor& tensor, int root);

  template <typename T>
  void all_reduce(std::span<T> values, ReduceOp op) {
    all_reduce(values.data(), values.size(), dtype_v<T>, op);
  }
  template <typename T>
  void broadcast(std::span<T> values, int root) {
    broadcast(values.data(), values.size(), dtype_v<T>, root);
  }
  // Reduces a single value (a loss, a metric, a flag) and returns the result on every rank.
  template <typename T>
  T all_reduce_value(T value, ReduceOp op) {
    all_reduce(&value, 1, dtype_v<T>, op);
    return value;
  }

 protected:
  explicit Communicator(const CommunicationOptions& options);

  // Implementations receive validated arguments and the collective's sequence number.
  virtual void do_all_reduce(void* buf, size_t count, DType dtype, ReduceOp op) = 0;
  virtual void do_reduce_scatter(const void* send, void* recv, size_t count, DType dtype,
                                 ReduceOp op) = 0;
  virtual void do_all_gather(const void* send, void* recv, size_t count_per_rank, DType dtype) = 0;
  virtual void do_broadcast(void* buf, size_t count, DType dtype, int root) = 0;
  virtual void do_barrier() = 0;
  virtual void do_all_reduce_compressed(bfloat16* buf, size_t count) {
    do_all_reduce(buf, count, DType::bfloat16, ReduceOp::SUM);
  }

  // "all_reduce #57 (float32[101770], SUM)": the collective now running, for error messages.
  std::string describe_current() const;
  // The sequence number (1-based) of the collective now running.
  uint64_t sequence() const { return sequence_; }

 private:
  void begin(const char* name, size_t count, DType dtype, int op, int root);
  CommunicationOptions options_;
  uint64_t sequence_ = 0;
  const char* current_name_ = "";
  size_t current_count_ = 0;
  DType current_dtype_ = DType::float32;
  int current_op_ = -1;    // a ReduceOp, or -1
  int current_root_ = -1;  // broadcast root, or -1
};

}  // namespace lockstep::distribute
