// Shared-memory collectives: N ranks as N threads of this test process (as c10d's tests do).
// Expected values are closed forms of what each rank contributed.
#include <gtest/gtest.h>

#include <atomic>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "lockstep/core/bfloat16.h"
#include "lockstep/core/error.h"
#include "lockstep/core/tensor.h"
#include "lockstep/distribute/collective.h"
#include "lockstep/distribute/shared_memory_group.h"
#include "testing/collective_values.h"
#include "testing/run_threads.h"

namespace lockstep::distribute {
namespace {

// Runs fn(comm) on `n` threads, one per rank; rethrows the first exception (by rank) in the caller.
void run_ranks(SharedMemoryGroup& group, const std::function<void(Communicator&)>& fn) {
  testing::run_threads(group.size(), [&](int r) { fn(*group.communicator(r)); });
}

void run_ranks(int n, const std::function<void(Communicator&)>& fn) {
  SharedMemoryGroup group(n, {.timeout_seconds = 60});
  run_ranks(group, fn);
}

using testing::closed_max;
using testing::closed_sum;
using testing::contribution;
using testing::from_double;
using testing::to_double;

const int kGroupSizes[] = {1, 2, 3, 4, 8};
const size_t kCounts[] = {0, 1, 3, 13, 314, 4099};

template <typename T>
void check_all_reduce_sum_and_max(int n, size_t count) {
  run_ranks(n, [&](Communicator& comm) {
    std::vector<T> sum(count), max(count);
    for (size_t i = 0; i < count; ++i)
      sum[i] = max[i] = from_double<T>(contribution(comm.rank(), i));
    comm.all_reduce(sum.data(), count, dtype_v<T>, ReduceOp::SUM);
    comm.all_reduce(max.data(), count, dtype_v<T>, ReduceOp::MAX);
    for (size_t i = 0; i < count; ++i) {
      ASSERT_EQ(to_double(sum[i]), to_double(from_double<T>(closed_sum(n, i))))
          << "n=" << n << " count=" << count << " i=" << i << " rank=" << comm.rank();
      ASSERT_EQ(to_double(max[i]), closed_max(n, i)) << "n=" << n << " i=" << i;
    }
  });
}

TEST(SharedMemoryAllReduce, SumAndMaxMatchClosedFormsForEveryDtypeGroupSizeAndCount) {
  for (int n : kGroupSizes) {
    for (size_t count : kCounts) {
      check_all_reduce_sum_and_max<float>(n, count);
      check_all_reduce_sum_and_max<double>(n, count);
      check_all_reduce_sum_and_max<int32_t>(n, count);
      check_all_reduce_sum_and_max<int64_t>(n, count);
      check_all_reduce_sum_and_max<bfloat16>(n, count);
    }
  }
}

TEST(SharedMemoryAllReduce, MeanDividesTheSumByTheGroupSize) {
  for (int n : kGroupSizes) {
    run_ranks(n, [&](Communicator& comm) {
      std::vector<float> f(314);
      std::vector<int64_t> k(314);
      for (size_t i = 0; i < f.size(); ++i) {
        f[i] = static_cast<float>(contribution(comm.rank(), i));
        k[i] = static_cast<int64_t>(contribution(comm.rank(), i));
      }
      comm.all_reduce(std::span<float>(f), ReduceOp::MEAN);
      comm.all_reduce(std::span<int64_t>(k), ReduceOp::MEAN);
      for (size_t i = 0; i < f.size(); ++i) {
        ASSERT_EQ(f[i], static_cast<float>(closed_sum(n, i)) / static_cast<float>(n));
        // Integer MEAN truncates toward zero.
        ASSERT_EQ(k[i], static_cast<int64_t>(closed_sum(n, i)) / n);
      }
    });
  }
}

TEST(SharedMemoryAllReduce, Bfloat16SumsInFloat32AndRoundsOnce) {
  // 256 + 1 is a tie in bfloat16 (8 significant bits) that rounds back to 256, so summing in
  // bfloat16 step by step would return 256 for any n. Summing in float32 gives 256 + (n - 1),
  // rounded once.
  for (int n : {2, 3, 4, 8}) {
    run_ranks(n, [&](Communicator& comm) {
      std::vector<bfloat16> v(13, bfloat16(comm.rank() == 0 ? 256.0f : 1.0f));
      comm.all_reduce(std::span<bfloat16>(v), ReduceOp::SUM);
      const bfloat16 expected(256.0f + static_cast<float>(n - 1));
      for (const bfloat16& x : v) ASSERT_EQ(x.bits, expected.bits) << "n=" << n;
    });
  }
}

TEST(SharedMemoryAllReduce, IntegerSumsWrapInsteadOfOverflowing) {
  run_ranks(2, [&](Communicator& comm) {
    const int32_t v = comm.all_reduce_value<int32_t>(INT32_MAX, ReduceOp::SUM);
    EXPECT_EQ(v, -2);  // 2 * (2^31 - 1) mod 2^32, as two's complement
  });
}

// Pseudo-random floats with a wide exponent range, so that the summation order matters.
float noise(int r, size_t i) {
  uint64_t x = (static_cast<uint64_t>(r) << 32) ^ (i * 0x9E3779B97F4A7C15ull);
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 32;
  const float mantissa = static_cast<float>(x & 0xffffff) / 16777216.0f - 0.5f;
  return std::ldexp(mantissa, static_cast<int>((x >> 24) % 20) - 10);
}

TEST(SharedMemoryAllReduce, FloatSumFoldsRanksInOrderAndIsBitIdenticalAcrossRepeats) {
  for (int n : {2, 3, 8}) {
    const size_t count = 101770;
    std::vector<float> expected(count);
    for (size_t i = 0; i < count; ++i) {
      float acc = noise(0, i);
      for (int r = 1; r < n; ++r) acc += noise(r, i);  // the documented order
      expected[i] = acc;
    }
    for (int repeat = 0; repeat < 3; ++repeat) {
      run_ranks(n, [&](Communicator& comm) {
        std::vector<float> v(count);
        for (size_t i = 0; i < count; ++i) v[i] = noise(comm.rank(), i);
        comm.all_reduce(std::span<float>(v), ReduceOp::SUM);
        ASSERT_EQ(std::memcmp(v.data(), expected.data(), count * sizeof(float)), 0)
            << "n=" << n << " repeat=" << repeat;
      });
    }
  }
}

TEST(SharedMemoryReduceScatter, EachRankReceivesTheReducedElementsOfItsBlock) {
  for (int n : kGroupSizes) {
    for (size_t count : kCounts) {
      run_ranks(n, [&](Communicator& comm) {
        std::vector<float> send(count);
        for (size_t i = 0; i < count; ++i)
          send[i] = static_cast<float>(contribution(comm.rank(), i));
        const BlockRange block = block_range(count, n, comm.rank());
        std::vector<float> recv(block.size() + 1, -1.0f);  // one guard element
        comm.reduce_scatter(send.data(), recv.data(), count, DType::float32, ReduceOp::SUM);
        for (size_t j = 0; j < block.size(); ++j) {
          ASSERT_EQ(recv[j], closed_sum(n, block.begin + j)) << "n=" << n << " count=" << count;
        }
        ASSERT_EQ(recv[block.size()], -1.0f) << "wrote past its block";
      });
    }
  }
}

TEST(BlockRange, SplitsUnevenCountsWithLargerBlocksLast) {
  EXPECT_EQ(block_range(13, 4, 0), (BlockRange{0, 3}));
  EXPECT_EQ(block_range(13, 4, 1), (BlockRange{3, 6}));
  EXPECT_EQ(block_range(13, 4, 2), (BlockRange{6, 9}));
  EXPECT_EQ(block_range(13, 4, 3), (BlockRange{9, 13}));
  // count < size: some blocks are empty, together they still cover [0, count).
  EXPECT_EQ(block_range(2, 3, 0), (BlockRange{0, 0}));
  EXPECT_EQ(block_range(2, 3, 1), (BlockRange{0, 1}));
  EXPECT_EQ(block_range(2, 3, 2), (BlockRange{1, 2}));
  for (int n : kGroupSizes) {
    for (size_t count : kCounts) {
      size_t next = 0;
      for (int r = 0; r < n; ++r) {
        const BlockRange b = block_range(count, n, r);
        EXPECT_EQ(b.begin, next);
        EXPECT_LE(b.size(), count / static_cast<size_t>(n) + 1);
        next = b.end;
      }
      EXPECT_EQ(next, count);
    }
  }
  EXPECT_THROW(block_range(10, 2, 2), InvalidArgument);
}

TEST(SharedMemoryAllGather, ConcatenatesEveryRanksContributionInRankOrder) {
  for (int n : kGroupSizes) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{13}, size_t{314}}) {
      run_ranks(n, [&](Communicator& comm) {
        std::vector<int64_t> send(count);
        for (size_t i = 0; i < count; ++i) send[i] = comm.rank() * 1000 + static_cast<int64_t>(i);
        std::vector<int64_t> recv(count * static_cast<size_t>(n), -1);
        comm.all_gather(send.data(), recv.data(), count, DType::int64);
        for (int r = 0; r < n; ++r) {
          for (size_t i = 0; i < count; ++i) {
            ASSERT_EQ(recv[static_cast<size_t>(r) * count + i], r * 1000 + static_cast<int64_t>(i));
          }
        }
      });
    }
  }
}

TEST(SharedMemoryAllGather, AcceptsSendAliasingItsOwnBlockOfRecv) {
  run_ranks(3, [&](Communicator& comm) {
    std::vector<float> recv(3 * 5, -1.0f);
    float* mine = recv.data() + comm.rank() * 5;
    for (int i = 0; i < 5; ++i) mine[i] = static_cast<float>(comm.rank() * 10 + i);
    comm.all_gather(mine, recv.data(), 5, DType::float32);
    for (int r = 0; r < 3; ++r) {
      for (int i = 0; i < 5; ++i) ASSERT_EQ(recv[static_cast<size_t>(r * 5 + i)], r * 10 + i);
    }
  });
}

TEST(SharedMemoryBroadcast, CopiesTheRootsBufferToEveryRankForEveryRoot) {
  for (int n : kGroupSizes) {
    for (int root = 0; root < n; ++root) {
      run_ranks(n, [&](Communicator& comm) {
        std::vector<double> v(314);
        for (size_t i = 0; i < v.size(); ++i) v[i] = comm.rank() * 1000.0 + static_cast<double>(i);
        comm.broadcast(std::span<double>(v), root);
        for (size_t i = 0; i < v.size(); ++i)
          ASSERT_EQ(v[i], root * 1000.0 + static_cast<double>(i));
      });
    }
  }
}

TEST(SharedMemoryBarrier, NoRankLeavesBeforeAllArrived) {
  for (int n : kGroupSizes) {
    std::vector<std::atomic<int>> arrived(1);
    arrived[0] = 0;
    run_ranks(n, [&](Communicator& comm) {
      for (int round = 1; round <= 50; ++round) {
        arrived[0].fetch_add(1);
        comm.barrier();
        ASSERT_GE(arrived[0].load(), round * n);
        comm.barrier();  // nobody starts the next round before everyone checked this one
      }
    });
  }
}

TEST(SharedMemoryCommunicator, TensorOverloadsReduceInPlaceAndCheckShapes) {
  run_ranks(3, [&](Communicator& comm) {
    Tensor t = Tensor::full({2, 7}, comm.rank() + 1.0);
    comm.all_reduce(t, ReduceOp::SUM);
    for (int64_t i = 0; i < t.num_elements(); ++i) ASSERT_EQ(t.at(i), 6.0);

    Tensor send = Tensor::full({13}, 1.0);
    const BlockRange b = block_range(13, 3, comm.rank());
    Tensor recv({static_cast<int64_t>(b.size())});
    comm.reduce_scatter(send, recv, ReduceOp::SUM);
    for (int64_t i = 0; i < recv.num_elements(); ++i) ASSERT_EQ(recv.at(i), 3.0);
    // Argument errors are detected locally, before any rank waits, so every rank can throw.
    EXPECT_THROW(comm.reduce_scatter(send, Tensor({13}), ReduceOp::SUM), InvalidArgument);
    EXPECT_THROW(comm.broadcast(t, 3), InvalidArgument);

    Tensor gathered({3, 2, 7});
    comm.all_gather(t, gathered);
    for (int64_t i = 0; i < gathered.num_elements(); ++i) ASSERT_EQ(gathered.at(i), 6.0);
  });
}

TEST(SharedMemoryCommunicator, MismatchedCallsThrowOnEveryRank) {
  SharedMemoryGroup group(2, {.timeout_seconds = 60});
  std::atomic<int> threw{0};
  run_ranks(group, [&](Communicator& comm) {
    std::vector<float> v(10 + static_cast<size_t>(comm.rank()));
    try {
      comm.all_reduce(v.data(), v.size(), DType::float32, ReduceOp::SUM);
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("rank 1 called all_reduce with 11"), std::string::npos)
          << e.what();
      threw.fetch_add(1);
    }
  });
  EXPECT_EQ(threw.load(), 2);
  EXPECT_FALSE(group.broken());  // every rank saw the same mismatch: the group stays usable
}

TEST(SharedMemoryCommunicator, BarrierAgainstAnotherCollectiveIsAMismatchNotADesync) {
  SharedMemoryGroup group(2, {.timeout_seconds = 60});
  std::atomic<int> threw{0};
  run_ranks(group, [&](Communicator& comm) {
    std::vector<float> v(4, 1.0f);
    try {
      if (comm.rank() == 0) {
        comm.barrier();
      } else {
        comm.all_reduce(std::span<float>(v), ReduceOp::SUM);
      }
    } catch (const InvalidArgument&) {
      threw.fetch_add(1);
    }
    // Still in step afterwards.
    comm.all_reduce(std::span<float>(v), ReduceOp::SUM);
    EXPECT_EQ(v[0], 2.0f);
  });
  EXPECT_EQ(threw.load(), 2);
}

TEST(SharedMemoryCommunicator, MissingRankMakesTheOthersThrowDeadlineExceededNamingIt) {
  SharedMemoryGroup group(3, {.timeout_seconds = 0.2});
  std::vector<std::string> messages(3);
  run_ranks(group, [&](Communicator& comm) {
    if (comm.rank() == 2) return;  // never calls: stands for a replica stuck or dead
    std::vector<float> v(100, 1.0f);
    try {
      comm.all_reduce(std::span<float>(v), ReduceOp::SUM);
      ADD_FAILURE() << "all_reduce returned without rank 2";
    } catch (const DeadlineExceeded& e) {
      messages[static_cast<size_t>(comm.rank())] = e.what();
    }
  });
  for (int r : {0, 1}) {
    const std::string& m = messages[static_cast<size_t>(r)];
    EXPECT_NE(m.find("rank 2 did not arrive"), std::string::npos) << m;
    EXPECT_NE(m.find("all_reduce #1"), std::string::npos) << m;
  }
  EXPECT_TRUE(group.broken());
  // The late rank, and every later call, gets the same error instead of waiting.
  std::vector<float> v(100);
  EXPECT_THROW(group.communicator(2)->all_reduce(std::span<float>(v), ReduceOp::SUM),
               DeadlineExceeded);
  EXPECT_THROW(group.communicator(0)->barrier(), DeadlineExceeded);
}

TEST(SharedMemoryCommunicator, AbortWakesWaitingRanksWithUnavailable) {
  SharedMemoryGroup group(2);  // no timeout: without abort() rank 0 would wait forever
  std::thread waiter([&] { EXPECT_THROW(group.communicator(0)->barrier(), Unavailable); });
  group.abort("replica 1 failed: test");
  waiter.join();
  try {
    group.communicator(1)->barrier();
    ADD_FAILURE() << "barrier on an aborted group returned";
  } catch (const Unavailable& e) {
    EXPECT_NE(std::string(e.what()).find("replica 1 failed: test"), std::string::npos);
  }
}

TEST(SharedMemoryCommunicator, OversubscribedGroupCompletesManyCollectives) {
  // 8 ranks on a machine with fewer cores: waiting ranks must sleep, not spin, for this to finish.
  run_ranks(8, [&](Communicator& comm) {
    std::vector<float> v(1000);
    for (int step = 0; step < 300; ++step) {
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(contribution(comm.rank(), i));
      comm.all_reduce(std::span<float>(v), ReduceOp::SUM);
      ASSERT_EQ(v[999], closed_sum(8, 999));
    }
  });
}

TEST(SharedMemoryGroup, RejectsBadArguments) {
  EXPECT_THROW(SharedMemoryGroup(0), InvalidArgument);
  EXPECT_THROW(SharedMemoryGroup(2, {.timeout_seconds = -1}), InvalidArgument);
  SharedMemoryGroup group(2);
  EXPECT_THROW(group.communicator(2), InvalidArgument);
  EXPECT_EQ(group.communicator(1)->rank(), 1);
  EXPECT_EQ(group.communicator(1)->size(), 2);
  EXPECT_EQ(group.communicator(1)->backend(), "shared_memory");
}

}  // namespace
}  // namespace lockstep::distribute
