// GradientSynchronizer across workers (the hierarchical all-reduce, and bfloat16 gradients across
// workers), under mpirun with LOCKSTEP_DEVICES=cpu:L local replicas per worker.
// The expected sums are computed here from the replicas' closed-form gradients: float32 sums in
// the documented order, and, for the bfloat16 cross-worker dtype, this file's own bfloat16
// rounding (round to nearest even, in double arithmetic, independent of lockstep's).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cfenv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "lockstep/lockstep.h"

namespace lockstep::distribute {
namespace {

// float -> nearest bfloat16 value (ties to even), for the normal, finite values used here: keep
// 8 significant bits. nearbyint rounds half to even in the default rounding mode.
float reference_bfloat16(float f) {
  const double x = f;
  const double ulp = std::ldexp(1.0, std::ilogb(x) - 7);
  return static_cast<float>(std::nearbyint(x / ulp) * ulp);
}

// Replica g's gradient element i: values with more than 8 significant bits, of similar magnitude.
float gradient_value(int g, size_t i) {
  return static_cast<float>(1.0 + 0.0123457 * (g + 1) + 0.000731 * static_cast<double>(i % 97) +
                            1e-6 * static_cast<double>(g * 7 + 3));
}

const std::vector<Shape> kShapes = {Shape{13}, Shape{314}, Shape{2, 5}};
constexpr size_t kTotal = 13 + 314 + 10;

struct Result {
  std::vector<float> sums;  // the flat summed gradient seen by this worker's replica 0
  SyncStats stats;
  int workers = 1;
  int local = 1;  // replicas per worker
};

enum class Overlap { kNone, kLastFirst, kFirstFirst };

// With overlap, each gradient is reported ready before the all_reduce — last first (as backward
// produces them) or first first (buckets complete out of order) — so that buckets go to the
// communication thread while "backward" continues.
Result synchronise(DType cross_dtype, size_t bucket_bytes, Overlap overlap = Overlap::kNone) {
  MultiWorkerMirroredStrategy strategy({.timeout_seconds = 60, .gradient_dtype = cross_dtype});
  const int local = strategy.num_local_replicas();
  GradientSynchronizer sync(kShapes, local, bucket_bytes, cross_dtype);
  Result result;
  result.workers = strategy.num_workers();
  result.local = local;
  strategy.run([&](ReplicaContext& ctx) {
    const int g = ctx.replica_id_in_sync_group();
    std::vector<Tensor> grads;
    size_t flat = 0;
    for (const Shape& s : kShapes) {
      Tensor t = Tensor::zeros(s);
      float* d = t.data<float>();
      for (int64_t k = 0; k < s.num_elements(); ++k) d[k] = gradient_value(g, flat++);
      grads.push_back(t);
    }
    if (overlap != Overlap::kNone) {
      const bool overlapping = sync.begin_overlap(ctx);
      EXPECT_EQ(overlapping, strategy.num_workers() > 1 && sync.num_buckets() > 1);
      for (size_t k = 0; k < grads.size(); ++k) {
        const size_t i = overlap == Overlap::kLastFirst ? grads.size() - 1 - k : k;
        sync.gradient_ready(ctx, i, grads[i]);
      }
    }
    const std::vector<Tensor>& summed = sync.all_reduce(ctx, grads);
    if (ctx.local_replica_id() == 0) {
      for (const Tensor& t : summed) {
        const std::vector<float> v = t.to_vector<float>();
        result.sums.insert(result.sums.end(), v.begin(), v.end());
      }
    }
  });
  result.stats = sync.stats();
  return result;
}

// The float32 sum of one worker's local replicas, in local rank order (GradientSynchronizer's
// reduce-scatter order).
float local_sum(int worker, int local, size_t i) {
  float s = gradient_value(worker * local, i);
  for (int r = 1; r < local; ++r) s += gradient_value(worker * local + r, i);
  return s;
}

TEST(GradientSyncAcrossWorkers, Float32SumsEveryReplicasGradientExactly) {
  Result r = synchronise(DType::float32, /*bucket_bytes=*/40);  // 10-element buckets: 34 of them
  const int w = r.workers, local = r.local;
  ASSERT_EQ(r.sums.size(), kTotal);
  for (size_t i = 0; i < kTotal; ++i) {
    // Two workers add two float32 values (one rounding, order-free); more workers sum values
    // whose float32 sum is exact here only if MPI adds in worker order, so compare loosely then.
    float expected = local_sum(0, local, i);
    for (int k = 1; k < w; ++k) expected += local_sum(k, local, i);
    if (w <= 2) {
      ASSERT_EQ(r.sums[i], expected) << "element " << i;
    } else {
      ASSERT_NEAR(r.sums[i], expected, 4e-7 * std::fabs(expected)) << "element " << i;
    }
  }
  EXPECT_EQ(r.stats.bytes_per_step, kTotal * sizeof(float));
}

TEST(GradientSyncAcrossWorkers, Bfloat16RoundsEachWorkersSumAndEachPartialSum) {
  Result r = synchronise(DType::bfloat16, /*bucket_bytes=*/64);
  const int w = r.workers, local = r.local;
  ASSERT_EQ(r.sums.size(), kTotal);
  size_t differs_from_float32 = 0;
  for (size_t i = 0; i < kTotal; ++i) {
    // Each worker rounds its float32 local sum to bfloat16; bfloat16 crosses workers, each
    // partial sum formed in float32 and rounded (all_reduce_compressed). With two workers that
    // is one addition: exactly bfloat16(b0 + b1). With more, the tree's order is MPI's: within
    // w - 1 roundings (2^-8 relative each) of the sum of the rounded local sums.
    float total = 0, exact = 0;
    for (int k = 0; k < w; ++k) {
      total += reference_bfloat16(local_sum(k, local, i));
      exact += local_sum(k, local, i);
    }
    if (w == 1) {
      ASSERT_EQ(r.sums[i], exact) << "element " << i;
    } else if (w == 2) {
      ASSERT_EQ(r.sums[i], reference_bfloat16(total)) << "element " << i;
    } else {
      ASSERT_NEAR(r.sums[i], total, (w - 1) * std::ldexp(std::fabs(total), -8)) << "element " << i;
    }
    if (r.sums[i] != exact) ++differs_from_float32;
  }
  if (w > 1) {
    // Half the bytes cross workers, and the rounding is real (not a float32 sum relabelled).
    EXPECT_EQ(r.stats.bytes_per_step, kTotal * sizeof(uint16_t));
    EXPECT_GT(differs_from_float32, kTotal / 2);
  } else {
    EXPECT_EQ(r.stats.bytes_per_step, kTotal * sizeof(float));  // nothing crosses workers
  }
}

TEST(GradientSyncAcrossWorkers, OverlappedBucketsGiveTheSameBitsAsTheBlockingPath) {
  for (DType dtype : {DType::float32, DType::bfloat16}) {
    // 64-byte buckets: the 13 and 10-element gradients are buckets of their own, the 314-element
    // one is one bucket too (a gradient is never split), so 3 buckets.
    Result blocking = synchronise(dtype, 64);
    ASSERT_EQ(blocking.sums.size(), kTotal);
    for (Overlap order : {Overlap::kLastFirst, Overlap::kFirstFirst}) {
      Result overlapped = synchronise(dtype, 64, order);
      EXPECT_EQ(overlapped.sums, blocking.sums) << dtype_name(dtype);
      EXPECT_EQ(overlapped.stats.bytes_per_step, blocking.stats.bytes_per_step);
      EXPECT_EQ(overlapped.stats.steps, 1u);
    }
  }
}

}  // namespace
}  // namespace lockstep::distribute

int main(int argc, char** argv) {
  using namespace lockstep::distribute;
  ::testing::InitGoogleTest(&argc, argv);
  MpiContext& mpi = mpi_initialize(&argc, &argv);
  if (mpi.world_rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int failed = RUN_ALL_TESTS();
  if (mpi.active()) {
    int any = failed != 0 ? 1 : 0;
    MPI_Allreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    failed = any;
  }
  mpi.finalize();
  return failed;
}
