#include "lockstep/distribute/gradient_sync.h"

#include <chrono>
#include <cstring>

#include "../collectives/reduce_kernels.h"
#include "lockstep/core/error.h"

namespace lockstep::distribute {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

GradientSynchronizer::GradientSynchronizer(std::vector<Shape> shapes, int num_local_replicas,
                                           size_t bucket_bytes, DType cross_worker_dtype)
    : shapes_(std::move(shapes)),
      num_local_(num_local_replicas),
      bucket_elements_(std::max<size_t>(1, bucket_bytes / sizeof(float))),
      cross_dtype_(cross_worker_dtype) {
  if (cross_dtype_ != DType::float32 && cross_dtype_ != DType::bfloat16) {
    throw InvalidArgument(
        "GradientSynchronizer: the cross-worker gradient dtype must be float32 or bfloat16. "
        "Received: " +
        std::string(dtype_name(cross_dtype_)) + ".");
  }
  for (const Shape& s : shapes_) {
    offsets_.push_back(total_);
    total_ += s.num_elements();
  }
  claims_ = std::make_unique<PieceClaims[]>(static_cast<size_t>(num_local_));
  for (int r = 0; r < num_local_; ++r) {
    packed_.push_back(Tensor::zeros({total_}));
    std::vector<Tensor> views;
    for (size_t i = 0; i < shapes_.size(); ++i) {
      views.push_back(packed_.back()
                          .slice(offsets_[i], offsets_[i] + shapes_[i].num_elements())
                          .reshape(shapes_[i]));
    }
    packed_views_.push_back(std::move(views));
  }
  // Buckets from the last gradient backwards, each closed once it holds bucket_elements_; the
  // first (the last layers' gradients, ready first) at most 1 MiB, as DDP does, so that
  // communication starts early in the backward pass.
  bucket_of_.assign(shapes_.size(), 0);
  for (size_t end = shapes_.size(); end > 0;) {
    const size_t limit = buckets_.empty()
                             ? std::min(bucket_elements_, kFirstBucketBytes / sizeof(float))
                             : bucket_elements_;
    Bucket b;
    b.end_var = end;
    size_t first = end;
    size_t elements = 0;
    while (first > 0 && (elements == 0 || elements < limit)) {
      --first;
      elements += static_cast<size_t>(shapes_[first].num_elements());
    }
    b.first_var = first;
    b.begin = static_cast<size_t>(offsets_[first]);
    b.end = b.begin + elements;
    for (size_t v = first; v < end; ++v) bucket_of_[v] = buckets_.size();
    buckets_.push_back(b);
    end = first;
  }
  steps_.resize(static_cast<size_t>(num_local_));
  accumulated_.resize(static_cast<size_t>(num_local_));
  has_accumulated_.assign(static_cast<size_t>(num_local_), 0);
  for (ReplicaStep& st : steps_) {
    st.ready.assign(buckets_.size(), 0);
  }
  if (cross_dtype_ == DType::bfloat16) cross_buckets_.resize(buckets_.size());
  summed_ = Tensor::zeros({total_});
  for (size_t i = 0; i < shapes_.size(); ++i) {
    summed_views_.push_back(
        summed_.slice(offsets_[i], offsets_[i] + shapes_[i].num_elements()).reshape(shapes_[i]));
  }
}

BlockRange GradientSynchronizer::owned_range(int local_replica) const {
  return block_range(static_cast<size_t>(total_), num_local_, local_replica);
}

void GradientSynchronizer::pack(int r, const std::vector<Tensor>& grads) {
  if (grads.size() != shapes_.size()) {
    throw InvalidArgument("GradientSynchronizer: expected " + std::to_string(shapes_.size()) +
                          " gradients. Received " + std::to_string(grads.size()) + ".");
  }
  for (size_t i = 0; i < grads.size(); ++i) pack_one(r, i, grads[i]);
  if (has_accumulated_[static_cast<size_t>(r)]) {
    // What accumulate() kept since the last synchronisation joins this step's gradients.
    float* g = packed_[static_cast<size_t>(r)].data<float>();
    const float* a = accumulated_[static_cast<size_t>(r)].data<float>();
    for (int64_t k = 0; k < total_; ++k) g[k] = a[k] + g[k];
    has_accumulated_[static_cast<size_t>(r)] = 0;
  }
}

void GradientSynchronizer::accumulate(ReplicaContext& ctx, const std::vector<Tensor>& grads) {
  const auto r = static_cast<size_t>(ctx.local_replica_id());
  pack(static_cast<int>(r), grads);  // G_r = A_r + grads
  if (!accumulated_[r].defined()) accumulated_[r] = Tensor::zeros({total_});
  std::memcpy(accumulated_[r].data<float>(), packed_[r].data<float>(),
              static_cast<size_t>(total_) * sizeof(float));
  has_accumulated_[r] = 1;
}

void GradientSynchronizer::pack_one(int r, size_t i, const Tensor& grad) {
  float* g = packed_[static_cast<size_t>(r)].data<float>();
  size_t n = static_cast<size_t>(shapes_[i].num_elements());
  float* dst = g + offsets_[i];
  if (!grad.defined()) {
    std::memset(dst, 0, n * sizeof(float));
    return;
  }
  if (!(grad.shape() == shapes_[i])) {
    throw InvalidArgument("GradientSynchronizer: gradient " + std::to_string(i) + " is " +
                          grad.describe() + "; expected shape " + shapes_[i].to_string() + ".");
  }
  if (grad.dtype() == DType::float32) {
    // Already in place when the tape wrote it into gradient_buffers(r).
    if (grad.data<float>() != dst) std::memcpy(dst, grad.data<float>(), n * sizeof(float));
  } else {
    Tensor f = grad.to(DType::float32);
    std::memcpy(dst, f.data<float>(), n * sizeof(float));
  }
}

bool GradientSynchronizer::begin_overlap(ReplicaContext& ctx) {
  const int r = ctx.local_replica_id();
  // Accumulated gradients join in pack(), after backward: such a step ships at the end (the same
  // buckets in the same order, so ranks that overlap and ranks that do not still match).
  if (!ctx.cross_worker_communicator() || buckets_.size() < 2 ||
      has_accumulated_[static_cast<size_t>(r)]) {
    return false;
  }
  if (r == 0 && !reducer_) {
    // Non-owning: the strategy owns the communicator and outlives the compiled model's steps.
    reducer_ = std::make_unique<BackgroundReducer>(std::shared_ptr<Communicator>(
        std::shared_ptr<Communicator>{}, ctx.cross_worker_communicator()));
  }
  steps_[static_cast<size_t>(r)].overlapping = true;
  return true;
}

void GradientSynchronizer::gradient_ready(ReplicaContext& ctx, size_t index, const Tensor& grad) {
  const int r = ctx.local_replica_id();
  ReplicaStep& st = steps_[static_cast<size_t>(r)];
  if (!st.overlapping || index >= shapes_.size()) return;
  pack_one(r, index, grad);
  auto complete = [&](size_t b) {
    return st.ready[b] == buckets_[b].end_var - buckets_[b].first_var;
  };
  ++st.ready[bucket_of_[index]];
  // Buckets leave in index order whatever order they complete in, so that every rank — and a
  // replica that had no examples this step, which ships everything in all_reduce — issues the
  // same collectives in the same order.
  while (st.next < buckets_.size() && complete(st.next)) {
    ship_bucket(ctx, st.next++, *ctx.cross_worker_communicator(), /*background=*/true);
  }
}

// Sums bucket b over the local replicas into S (each replica its block of the bucket), then local
// replica 0 all-reduces it across workers: on the communication thread when `background`, else
// here. Called by every local replica, for the buckets in the same order.
void GradientSynchronizer::ship_bucket(ReplicaContext& ctx, size_t b, Communicator& cross,
                                       bool background) {
  const int r = ctx.local_replica_id();
  Communicator& local = ctx.local_communicator();
  const Bucket& k = buckets_[b];
  const size_t count = k.end - k.begin;
  const BlockRange part = block_range(count, num_local_, r);
  auto start = std::chrono::steady_clock::now();
  local.reduce_scatter(packed_[static_cast<size_t>(r)].data<float>() + k.begin,
                       summed_.data<float>() + k.begin + part.begin, count, DType::float32,
                       ReduceOp::SUM);
  // Every local block must be in S before replica 0 ships the bucket to the other workers.
  local.barrier();
  if (r != 0) return;
  stats_.local_seconds += seconds_since(start);
  float* s = summed_.data<float>() + k.begin;
  if (cross_dtype_ == DType::bfloat16) {
    // Half the bytes on the wire: bfloat16 crosses workers, each partial sum rounded to bfloat16
    // (Communicator::all_reduce_compressed).
    std::vector<bfloat16>& half = cross_buckets_[b];
    half.resize(count);
    float_to_bfloat16(s, half.data(), count);
    if (background) {
      reducer_->enqueue_compressed(half.data(), count);
    } else {
      start = std::chrono::steady_clock::now();
      cross.all_reduce_compressed(half.data(), count);
      stats_.cross_worker_seconds += seconds_since(start);
      bfloat16_to_float(half.data(), s, count);
    }
  } else if (background) {
    reducer_->enqueue(s, count, DType::float32, ReduceOp::SUM);
  } else {
    start = std::chrono::steady_clock::now();
    cross.all_reduce(s, count, DType::float32, ReduceOp::SUM);
    stats_.cross_worker_seconds += seconds_since(start);
  }
}

const std::vector<Tensor>& GradientSynchronizer::all_reduce_across_workers(ReplicaContext& ctx,
                                                                           Communicator& cross) {
  const int r = ctx.local_replica_id();
  ReplicaStep& st = steps_[static_cast<size_t>(r)];
  // What backward did not ship (everything, without overlap), in bucket order on every rank.
  for (; st.next < buckets_.size(); ++st.next) ship_bucket(ctx, st.next, cross, st.overlapping);
  if (r == 0) {
    ++stats_.steps;
    stats_.bytes_per_step = static_cast<size_t>(total_) *
                            (cross_dtype_ == DType::bfloat16 ? sizeof(bfloat16) : sizeof(float));
    if (st.overlapping) {
      // Only the communication not hidden behind backward is counted: the wait.
      auto start = std::chrono::steady_clock::now();
      reducer_->wait();
      if (cross_dtype_ == DType::bfloat16) {
        for (size_t b = 0; b < buckets_.size(); ++b) {
          const Bucket& k = buckets_[b];
          bfloat16_to_float(cross_buckets_[b].data(), summed_.data<float>() + k.begin,
                            k.end - k.begin);
        }
      }
      stats_.cross_worker_seconds += seconds_since(start);
    }
  }
  st.overlapping = false;
  std::fill(st.ready.begin(), st.ready.end(), 0);
  st.next = 0;
  // Nobody reads S before the cross-worker sums are in.
  ctx.local_communicator().barrier();
  return summed_views_;
}

const std::vector<Tensor>& GradientSynchronizer::all_reduce(ReplicaContext& ctx,
                                                            const std::vector<Tensor>& grads) {
  int r = ctx.local_replica_id();
  pack(r, grads);
  if (Communicator* cross = ctx.cross_worker_communicator()) {
    return all_reduce_across_workers(ctx, *cross);
  }
  Communicator& local = ctx.local_communicator();
  BlockRange mine = owned_range(r);
  auto start = std::chrono::steady_clock::now();
  local.reduce_scatter(packed_[static_cast<size_t>(r)].data<float>(),
                       summed_.data<float>() + mine.begin, static_cast<size_t>(total_),
                       DType::float32, ReduceOp::SUM);
  if (r == 0) {
    stats_.local_seconds += seconds_since(start);
    ++stats_.steps;
    stats_.bytes_per_step = static_cast<size_t>(total_) * sizeof(float);
  }
  return summed_views_;
}

void GradientSynchronizer::reduce_and_apply_impl(ReplicaContext& ctx,
                                                 const std::vector<Tensor>& grads,
                                                 const ApplyRange& apply) {
  const int r = ctx.local_replica_id();
  Communicator& local = ctx.local_communicator();
  const BlockRange mine = owned_range(r);
  if (ctx.cross_worker_communicator() || local.size() != num_local_) {
    all_reduce(ctx, grads);
    apply.call(apply.fn, summed_views_, static_cast<int64_t>(mine.begin),
               static_cast<int64_t>(mine.end));
    local.barrier();
    return;
  }
  pack(r, grads);
  // The previous step's claims all happened before its closing barrier, and nobody claims this
  // step's pieces before the barrier below, which replica 0 reaches after this reset.
  if (r == 0) {
    for (int q = 0; q < num_local_; ++q)
      claims_[static_cast<size_t>(q)].next.store(0, std::memory_order_relaxed);
  }
  auto start = std::chrono::steady_clock::now();
  double fold_seconds = 0;
  // Every G_q must be complete before anyone reads it.
  local.barrier();
  if (r == 0) fold_seconds += seconds_since(start);
  std::vector<const void*> srcs(static_cast<size_t>(num_local_));
  float* s = summed_.data<float>();
  // Each replica sums and updates the pieces of its own block first (the same block every step,
  // so its optimizer slots stay in its cache), then takes the pieces the others have not started:
  // a replica delayed by something else on its core (the input pipeline's thread) no longer holds
  // up all others at the closing barrier. Who processes a piece does not change its values.
  for (int k = 0; k < num_local_; ++k) {
    const int q = (r + k) % num_local_;
    const BlockRange block = owned_range(q);
    const size_t pieces = (block.size() + kPiece - 1) / kPiece;
    for (size_t j = claims_[static_cast<size_t>(q)].next.fetch_add(1, std::memory_order_relaxed);
         j < pieces;
         j = claims_[static_cast<size_t>(q)].next.fetch_add(1, std::memory_order_relaxed)) {
      const size_t begin = block.begin + j * kPiece;
      const size_t n = std::min(kPiece, block.end - begin);
      auto piece_start = std::chrono::steady_clock::now();
      for (int p = 0; p < num_local_; ++p)
        srcs[static_cast<size_t>(p)] = packed_[static_cast<size_t>(p)].data<float>() + begin;
      void* dst = s + begin;
      // The fold the shared-memory reduce-scatter uses (rank order), hence the same sums.
      detail::reduce_fold(DType::float32, ReduceOp::SUM, srcs.data(), num_local_, &dst, 1, n,
                          num_local_);
      if (r == 0) fold_seconds += seconds_since(piece_start);
      apply.call(apply.fn, summed_views_, static_cast<int64_t>(begin),
                 static_cast<int64_t>(begin + n));
    }
  }
  // Nobody may overwrite its G_q (next step) or read the variables before all are done.
  local.barrier();
  if (r == 0) {
    stats_.local_seconds += fold_seconds;
    ++stats_.steps;
    stats_.bytes_per_step = static_cast<size_t>(total_) * sizeof(float);
  }
}

}  // namespace lockstep::distribute
