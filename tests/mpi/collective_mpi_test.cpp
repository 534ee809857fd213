// MPI collectives, run under `mpirun -np N` (N = 1, 2, 4). Every rank runs every test; the exit
// code is non-zero if any rank failed. Expected values are closed forms of what each rank
// contributed, as in tests/distribute/collective_shared_memory_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "distribute/collectives/mpi_communicator.h"
#include "lockstep/core/bfloat16.h"
#include "lockstep/core/error.h"
#include "lockstep/core/tensor.h"
#include "lockstep/distribute/background_reducer.h"
#include "lockstep/distribute/collective.h"
#include "testing/collective_values.h"

namespace lockstep::distribute {
namespace {

// Built once in main() (MPI communicators are created collectively, in the same order everywhere).
Communicator* g_comm = nullptr;

using testing::closed_max;
using testing::closed_sum;
using testing::contribution;
using testing::from_double;
using testing::to_double;

const size_t kCounts[] = {0, 1, 3, 13, 314, 4099};

template <typename T>
void check_sum_mean_max(Communicator& comm, size_t count) {
  const int n = comm.size();
  std::vector<T> sum(count), max(count), mean(count);
  for (size_t i = 0; i < count; ++i) {
    sum[i] = max[i] = mean[i] = from_double<T>(contribution(comm.rank(), i));
  }
  comm.all_reduce(sum.data(), count, dtype_v<T>, ReduceOp::SUM);
  comm.all_reduce(max.data(), count, dtype_v<T>, ReduceOp::MAX);
  comm.all_reduce(mean.data(), count, dtype_v<T>, ReduceOp::MEAN);
  for (size_t i = 0; i < count; ++i) {
    ASSERT_EQ(to_double(sum[i]), to_double(from_double<T>(closed_sum(n, i))))
        << dtype_name(dtype_v<T>) << " count=" << count << " i=" << i;
    ASSERT_EQ(to_double(max[i]), closed_max(n, i));
    if constexpr (std::is_integral_v<T>) {
      ASSERT_EQ(mean[i], static_cast<T>(static_cast<T>(closed_sum(n, i)) / n));
    } else if constexpr (std::is_same_v<T, bfloat16>) {
      ASSERT_EQ(mean[i].bits,
                bfloat16(static_cast<float>(closed_sum(n, i)) / static_cast<float>(n)).bits);
    } else {
      ASSERT_EQ(mean[i], static_cast<T>(closed_sum(n, i)) / static_cast<T>(n));
    }
  }
}

TEST(MpiAllReduce, SumMeanMaxMatchClosedFormsForEveryDtypeAndCount) {
  for (size_t count : kCounts) {
    check_sum_mean_max<float>(*g_comm, count);
    check_sum_mean_max<double>(*g_comm, count);
    check_sum_mean_max<int32_t>(*g_comm, count);
    check_sum_mean_max<int64_t>(*g_comm, count);
    check_sum_mean_max<bfloat16>(*g_comm, count);
  }
}

TEST(MpiAllReduce, Bfloat16SumsInFloat32AndRoundsOnce) {
  Communicator& comm = *g_comm;
  std::vector<bfloat16> v(13, bfloat16(comm.rank() == 0 ? 256.0f : 1.0f));
  comm.all_reduce(std::span<bfloat16>(v), ReduceOp::SUM);
  const bfloat16 expected(256.0f + static_cast<float>(comm.size() - 1));
  for (const bfloat16& x : v) ASSERT_EQ(x.bits, expected.bits);
}

// bfloat16 on the wire (gradient compression): with two ranks one addition, so the result is
// all_reduce's bit for bit; with more, every element stays within size() - 1 bfloat16 roundings of
// the exact sum (each partial sum rounded once, relative 2^-8 bounds it). Values with more than 8
// significant bits and of mixed sign, odd sizes, packs of 7 elements too.
TEST(MpiAllReduce, CompressedBfloat16SumsWithinItsRoundingBound) {
  Communicator& comm = *g_comm;
  const int n = comm.size();
  for (size_t count : {size_t{1}, size_t{13}, size_t{314}, size_t{4099}}) {
    std::vector<bfloat16> compressed(count), exact(count);
    std::vector<double> sum(count, 0.0), magnitude(count, 0.0);
    auto value = [](int r, size_t i) {
      return bfloat16(static_cast<float>((i % 3 == 0 ? -1.0 : 1.0) *
                                         (1.0 + 0.37 * r + 0.013 * static_cast<double>(i % 101))));
    };
    for (size_t i = 0; i < count; ++i) compressed[i] = exact[i] = value(comm.rank(), i);
    for (int r = 0; r < n; ++r) {
      for (size_t i = 0; i < count; ++i) {
        sum[i] += static_cast<float>(value(r, i));
        magnitude[i] += std::fabs(static_cast<float>(value(r, i)));
      }
    }
    comm.all_reduce_compressed(compressed.data(), count);
    comm.all_reduce(std::span<bfloat16>(exact), ReduceOp::SUM);
    for (size_t i = 0; i < count; ++i) {
      if (n <= 2) {
        ASSERT_EQ(compressed[i].bits, exact[i].bits) << "count " << count << " element " << i;
      } else {
        ASSERT_NEAR(static_cast<float>(compressed[i]), sum[i],
                    (n - 1) * std::ldexp(magnitude[i], -8))
            << "count " << count << " element " << i;
      }
    }
  }
}

TEST(MpiAllReduce, SplitsIntoPacksWithTheSameResult) {
  Communicator& comm = *g_comm;
  if (!mpi_initialize().active()) GTEST_SKIP() << "not launched by mpirun: no MPI";
  // A second communicator with small packs: 314 floats in packs of 100 bytes (25 floats).
  MpiCommunicator packed(MPI_COMM_WORLD, {.timeout_seconds = 60, .bytes_per_pack = 100});
  std::vector<float> v(314);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(contribution(comm.rank(), i));
  packed.all_reduce(std::span<float>(v), ReduceOp::SUM);
  for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], closed_sum(comm.size(), i));
}

// Ranks of one host all-reduce through a shared segment (futex waits) unless the user turned it
// off; the suite runs both ways (mpi_collectives_*_over_mpi set LOCKSTEP_MPI_HOST_SHARED=0).
TEST(MpiAllReduce, RanksOfOneHostUseTheSharedSegmentUnlessTurnedOff) {
  auto* mpi_comm = dynamic_cast<MpiCommunicator*>(g_comm);
  if (mpi_comm == nullptr) GTEST_SKIP() << "not launched by mpirun: no MPI";
  const char* env = std::getenv("LOCKSTEP_MPI_HOST_SHARED");
  const bool off = env != nullptr && std::string(env) == "0";
  EXPECT_EQ(mpi_comm->uses_host_shared_memory(), mpi_comm->size() > 1 && !off);
}

// 2.5 M floats (10 MB) per rank is more than one slot of the shared segment (at most 4 MiB): the
// all-reduce goes in several packs through alternating slot sets.
TEST(MpiAllReduce, BuffersLargerThanASlotMatchClosedForms) {
  Communicator& comm = *g_comm;
  const size_t count = 2'500'000;
  std::vector<float> sum(count);
  std::vector<double> mean(count);
  for (size_t i = 0; i < count; ++i) {
    sum[i] = static_cast<float>(contribution(comm.rank(), i));
    mean[i] = contribution(comm.rank(), i);
  }
  comm.all_reduce(std::span<float>(sum), ReduceOp::SUM);
  comm.all_reduce(std::span<double>(mean), ReduceOp::MEAN);
  for (size_t i = 0; i < count; ++i) {
    ASSERT_EQ(sum[i], static_cast<float>(closed_sum(comm.size(), i))) << "element " << i;
    ASSERT_EQ(mean[i], closed_sum(comm.size(), i) / comm.size()) << "element " << i;
  }
}

float noise(int r, size_t i) {
  uint64_t x = (static_cast<uint64_t>(r) << 32) ^ (i * 0x9E3779B97F4A7C15ull);
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 32;
  const float mantissa = static_cast<float>(x & 0xffffff) / 16777216.0f - 0.5f;
  return std::ldexp(mantissa, static_cast<int>((x >> 24) % 20) - 10);
}

uint64_t fnv1a(const void* data, size_t bytes) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < bytes; ++i)
    h = (h ^ static_cast<const uint8_t*>(data)[i]) * 1099511628211ull;
  return h;
}

TEST(MpiAllReduce, FloatSumIsBitIdenticalAcrossRepeatsAndRanks) {
  Communicator& comm = *g_comm;
  const size_t count = 101770;  // the seed model's gradient
  std::vector<float> first;
  for (int repeat = 0; repeat < 3; ++repeat) {
    std::vector<float> v(count);
    for (size_t i = 0; i < count; ++i) v[i] = noise(comm.rank(), i);
    comm.all_reduce(std::span<float>(v), ReduceOp::SUM);
    // Through the shared segment the sum is ((x_0 + x_1) + x_2) + ... in rank order, in float32,
    // whether each rank summed its block or everything; MPI_Allreduce has an order of its own
    // (the same for two ranks: a + b = b + a).
    auto* mpi_comm = dynamic_cast<MpiCommunicator*>(g_comm);
    const bool rank_order =
        comm.size() <= 2 || (mpi_comm != nullptr && mpi_comm->uses_host_shared_memory());
    if (repeat == 0 && rank_order) {
      for (size_t i = 0; i < count; ++i) {
        float ref = noise(0, i);
        for (int r = 1; r < comm.size(); ++r) ref += noise(r, i);
        ASSERT_EQ(v[i], ref) << "element " << i << " of " << comm.size() << " ranks";
      }
    }
    if (repeat == 0) {
      first = v;
    } else {
      ASSERT_EQ(std::memcmp(v.data(), first.data(), count * sizeof(float)), 0);
    }
  }
  // Every rank holds the same bits: broadcast rank 0's hash and compare.
  uint64_t hash = fnv1a(first.data(), count * sizeof(float));
  uint64_t root_hash = hash;
  comm.broadcast(&root_hash, 1, DType::int64, 0);
  EXPECT_EQ(hash, root_hash);
  // The driver run_twice_compare.sh compares this line between two separate launches.
  if (comm.rank() == 0)
    std::printf("determinism-hash np=%d: %016llx\n", comm.size(),
                static_cast<unsigned long long>(hash));
}

TEST(MpiReduceScatter, EachRankReceivesTheReducedElementsOfItsBlock) {
  Communicator& comm = *g_comm;
  const int n = comm.size();
  for (size_t count : kCounts) {
    for (ReduceOp op : {ReduceOp::SUM, ReduceOp::MEAN}) {
      std::vector<double> send(count);
      for (size_t i = 0; i < count; ++i) send[i] = contribution(comm.rank(), i);
      const BlockRange block = block_range(count, n, comm.rank());
      std::vector<double> recv(block.size() + 1, -1.0);
      comm.reduce_scatter(send.data(), recv.data(), count, DType::float64, op);
      for (size_t j = 0; j < block.size(); ++j) {
        const double sum = closed_sum(n, block.begin + j);
        ASSERT_EQ(recv[j], op == ReduceOp::SUM ? sum : sum / n) << "count=" << count;
      }
      ASSERT_EQ(recv[block.size()], -1.0) << "wrote past its block";
    }
    // bfloat16 goes through the widening path.
    std::vector<bfloat16> send(count);
    for (size_t i = 0; i < count; ++i)
      send[i] = bfloat16(static_cast<float>(contribution(comm.rank(), i)));
    const BlockRange block = block_range(count, n, comm.rank());
    std::vector<bfloat16> recv(block.size());
    comm.reduce_scatter(send.data(), recv.data(), count, DType::bfloat16, ReduceOp::SUM);
    for (size_t j = 0; j < block.size(); ++j) {
      ASSERT_EQ(static_cast<float>(recv[j]), closed_sum(n, block.begin + j));
    }
  }
}

TEST(MpiAllGather, ConcatenatesEveryRanksContributionInRankOrder) {
  Communicator& comm = *g_comm;
  const int n = comm.size();
  for (size_t count : {size_t{0}, size_t{1}, size_t{13}, size_t{314}}) {
    std::vector<int32_t> send(count);
    for (size_t i = 0; i < count; ++i) send[i] = comm.rank() * 1000 + static_cast<int32_t>(i);
    std::vector<int32_t> recv(count * static_cast<size_t>(n), -1);
    comm.all_gather(send.data(), recv.data(), count, DType::int32);
    for (int r = 0; r < n; ++r) {
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(recv[static_cast<size_t>(r) * count + i], r * 1000 + static_cast<int32_t>(i));
      }
    }
    // In place: the send buffer is this rank's block of recv.
    std::vector<int32_t> inplace(count * static_cast<size_t>(n), -1);
    std::copy(send.begin(), send.end(), inplace.begin() + static_cast<long>(comm.rank() * count));
    comm.all_gather(inplace.data() + comm.rank() * count, inplace.data(), count, DType::int32);
    ASSERT_EQ(inplace, recv);
  }
}

TEST(MpiBroadcast, CopiesTheRootsBufferToEveryRankForEveryRoot) {
  Communicator& comm = *g_comm;
  for (int root = 0; root < comm.size(); ++root) {
    for (size_t count : {size_t{13}, size_t{314}}) {
      std::vector<float> v(count);
      for (size_t i = 0; i < count; ++i)
        v[i] = static_cast<float>(comm.rank() * 1000 + static_cast<int>(i));
      comm.broadcast(std::span<float>(v), root);
      for (size_t i = 0; i < count; ++i)
        ASSERT_EQ(v[i], static_cast<float>(root * 1000 + static_cast<int>(i)));
    }
  }
}

TEST(MpiCommunicator, TensorOverloadsAndBarrierWork) {
  Communicator& comm = *g_comm;
  Tensor t = Tensor::full({2, 7}, comm.rank() + 1.0);
  comm.all_reduce(t, ReduceOp::SUM);
  const double n = comm.size();
  for (int64_t i = 0; i < t.num_elements(); ++i) ASSERT_EQ(t.at(i), n * (n + 1) / 2);
  comm.barrier();
  // Without mpirun the world is a one-rank group that needs no MPI at all.
  EXPECT_EQ(comm.backend(), mpi_initialize().launched_by_mpirun() ? "mpi" : "shared_memory");
}

// The communication thread of BackgroundReducer drives the MPI communicator (MPI_THREAD_MULTIPLE
// hands it over between threads): queued buckets of odd sizes, bfloat16 included, end up with the
// closed-form sums, in two rounds on the same reducer.
TEST(MpiBackgroundReducer, QueuedBucketsMatchClosedForms) {
  Communicator& comm = *g_comm;
  const int n = comm.size();
  // A non-owning handle: main() owns the communicator.
  BackgroundReducer reducer(std::shared_ptr<Communicator>(std::shared_ptr<Communicator>{}, g_comm));
  for (int round = 0; round < 2; ++round) {
    std::vector<std::vector<float>> buckets;
    for (size_t count : {size_t{13}, size_t{314}, size_t{4099}, size_t{1}}) {
      std::vector<float> b(count);
      for (size_t i = 0; i < count; ++i) b[i] = static_cast<float>(contribution(comm.rank(), i));
      buckets.push_back(std::move(b));
    }
    std::vector<bfloat16> half(77);
    for (size_t i = 0; i < half.size(); ++i) {
      half[i] = from_double<bfloat16>(contribution(comm.rank(), i));
    }
    for (auto& b : buckets) reducer.enqueue(b.data(), b.size(), DType::float32, ReduceOp::SUM);
    reducer.enqueue(half.data(), half.size(), DType::bfloat16, ReduceOp::SUM);
    reducer.wait();
    for (auto& b : buckets) {
      for (size_t i = 0; i < b.size(); ++i) ASSERT_EQ(b[i], closed_sum(n, i)) << "element " << i;
    }
    for (size_t i = 0; i < half.size(); ++i) {
      ASSERT_EQ(to_double(half[i]), to_double(from_double<bfloat16>(closed_sum(n, i))));
    }
  }
  EXPECT_EQ(reducer.completed(), 10u);
}

// The value Open MPI itself runs with for an MCA parameter, read through the MPI tool interface
// (MPI_T), or "" when the parameter does not exist in this build.
std::string mpi_t_control_value(const std::string& name) {
  int provided = 0;
  if (MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS) return "";
  std::string result;
  int num = 0;
  MPI_T_cvar_get_num(&num);
  for (int i = 0; i < num && result.empty(); ++i) {
    char cname[256], desc[1024];
    int name_len = sizeof cname, desc_len = sizeof desc, verbosity = 0, bind = 0, scope = 0;
    MPI_Datatype type;
    MPI_T_enum enumtype = MPI_T_ENUM_NULL;
    if (MPI_T_cvar_get_info(i, cname, &name_len, &verbosity, &type, &enumtype, desc, &desc_len,
                            &bind, &scope) != MPI_SUCCESS ||
        name != cname) {
      continue;
    }
    MPI_T_cvar_handle handle;
    int count = 0;
    if (MPI_T_cvar_handle_alloc(i, nullptr, &handle, &count) != MPI_SUCCESS) break;
    int value = -1;
    MPI_T_cvar_read(handle, &value);
    MPI_T_cvar_handle_free(&handle);
    result = std::to_string(value);
    int items = 0;
    char ename[64];
    int ename_len = sizeof ename;
    if (enumtype != MPI_T_ENUM_NULL &&
        MPI_T_enum_get_info(enumtype, &items, ename, &ename_len) == MPI_SUCCESS) {
      for (int k = 0; k < items; ++k) {
        int item_value = 0;
        char item[64];
        int item_len = sizeof item;
        if (MPI_T_enum_get_item(enumtype, k, &item_value, item, &item_len) == MPI_SUCCESS &&
            item_value == value) {
          result = item;
        }
      }
    }
  }
  MPI_T_finalize();
  return result;
}

// Lockstep makes Open MPI's shared-memory transport copy through its segment instead of CMA
// (mpi_communicator.cpp, apply_transport_defaults) unless the user chose a mechanism; CTest runs
// this binary once plainly (expects "none") and once with `--mca
// btl_vader_single_copy_mechanism cma` (expects "cma": the user's setting wins).
TEST(MpiContext, SharedMemoryTransportDefaultsYieldToTheUser) {
  if (!mpi_initialize().launched_by_mpirun()) GTEST_SKIP() << "not launched by mpirun: no MPI";
  const char* expected_env = std::getenv("LOCKSTEP_TEST_EXPECT_SINGLE_COPY");
  const std::string expected = expected_env ? expected_env : "none";
  const char* env = std::getenv("OMPI_MCA_btl_vader_single_copy_mechanism");
  ASSERT_NE(env, nullptr);
  EXPECT_EQ(std::string(env), expected);
  // A world of one opens no shared-memory transport, so Open MPI has no such parameter then.
  if (mpi_initialize().world_size() > 1) {
    EXPECT_EQ(mpi_t_control_value("btl_vader_single_copy_mechanism"), expected);
  }
}

}  // namespace
}  // namespace lockstep::distribute

int main(int argc, char** argv) {
  using namespace lockstep::distribute;
  ::testing::InitGoogleTest(&argc, argv);
  MpiContext& mpi = mpi_initialize(&argc, &argv);
  int failed = 0;
  {
    // LOCKSTEP_TEST_TIMEOUT=0 runs the suite without a deadline (waits that never give up).
    const char* timeout = std::getenv("LOCKSTEP_TEST_TIMEOUT");
    std::shared_ptr<Communicator> world =
        mpi.world({.timeout_seconds = timeout ? std::atof(timeout) : 60.0});
    g_comm = world.get();
    if (mpi.world_rank() != 0) {
      // One rank's progress output is enough; failures on any rank still print and fail the run.
      auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
      delete listeners.Release(listeners.default_result_printer());
    }
    std::printf("rank %d of %d, launched by mpirun: %d, thread level %s\n", mpi.world_rank(),
                mpi.world_size(), mpi.launched_by_mpirun() ? 1 : 0,
                std::string(mpi.thread_level_name()).c_str());
    failed = RUN_ALL_TESTS();
    failed = world->all_reduce_value<int32_t>(failed != 0 ? 1 : 0, ReduceOp::MAX);
    g_comm = nullptr;
  }
  mpi.finalize();
  return failed;
}
