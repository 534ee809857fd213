// BufferedUpdate against a fake elementwise rule: the update out of place and flipped, the same
// bits on any number of threads and with streaming stores (everything, or on several threads the
// float32 values the replicas multiply by), the sum read chunk by chunk from
// replica runs, and a chunk won by a backup run published through the spare buffers (with the
// weights' bfloat16 rounding).
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "distribute/step/buffered_update.h"
#include "distribute/step/chunk_layout.h"
#include "distribute/step/task_pool.h"
#include "step_fakes.h"

namespace lockstep::distribute {
namespace {

using testing::FakeUpdate;
using testing::gradient_value;
using testing::make_strategy;
using testing::make_variables;

// 9000 elements: five chunks at the smallest chunk size, the last cut short.
const std::vector<int64_t> kSizes = {9000, 7, 1};

std::vector<float> flat_sum(const ChunkLayout& layout) {
  std::vector<float> g(static_cast<size_t>(layout.total()));
  for (size_t v = 0; v < layout.num_vars(); ++v)
    for (int64_t j = 0; j < layout.size(v); ++j)
      g[static_cast<size_t>(layout.begin(v) + j)] = gradient_value(0, v, j);
  return g;
}

// Puts back the process's stream_shared_reads setting (the CPU vendor's default) when a test that
// runs both settings ends.
class StreamSharedReadsRestored {
 public:
  StreamSharedReadsRestored() : saved_(BufferedUpdate::stream_shared_reads()) {}
  ~StreamSharedReadsRestored() { BufferedUpdate::set_stream_shared_reads(saved_); }

 private:
  bool saved_;
};

// After one update from gradient g: w = w0 - g / 2, m = g, and the rounding of w when kept.
void expect_updated(const std::vector<Variable>& vars, const std::vector<Variable>& initial,
                    const FakeUpdate& rule, const ChunkLayout& layout, const std::vector<float>& g,
                    bool rounding = false) {
  for (size_t v = 0; v < vars.size(); ++v) {
    const float* w = vars[v].raw_value().data<float>();
    const float* w0 = initial[v].raw_value().data<float>();
    const float* m = rule.slot(v).raw_value().data<float>();
    for (int64_t j = 0; j < layout.size(v); ++j) {
      const float gj = g[static_cast<size_t>(layout.begin(v) + j)];
      ASSERT_EQ(w[j], w0[j] - gj * 0.5f) << "var " << v << "[" << j << "]";
      ASSERT_EQ(m[j], gj) << "var " << v << "[" << j << "]";
      if (rounding) {
        ASSERT_EQ(rule.rounded(v, static_cast<size_t>(j)), static_cast<float>(bfloat16(w[j])));
      }
    }
  }
}

TEST(BufferedUpdate, UpdatesOutOfPlaceAndFlipsOnAnyNumberOfThreads) {
  for (int threads : {1, 2, 3}) {
    auto strategy = make_strategy(1, threads);
    std::vector<Variable> vars = make_variables(kSizes);
    const std::vector<Variable> initial = make_variables(kSizes);
    FakeUpdate rule;
    ChunkLayout layout(vars, threads);
    ASSERT_GT(layout.chunks().size(), 4u);
    BufferedUpdate update(layout, vars, rule, strategy->task_pool().total_threads());
    std::vector<float> g = flat_sum(layout);
    const float* before = vars[0].raw_value().data<float>();
    update.begin_update();
    strategy->task_pool().run(update.phase_from_sum(g.data()));
    update.end_update();
    EXPECT_NE(vars[0].raw_value().data<float>(), before) << "the next buffer became current";
    EXPECT_EQ(rule.begins, 1);
    EXPECT_EQ(rule.ends, 1);
    expect_updated(vars, initial, rule, layout, g);
    EXPECT_EQ(g, flat_sum(layout)) << "the sum is read, not written";
    strategy->task_pool().wait_for_runs_before(UINT64_MAX);
  }
}

// What one update of kSizes' variables needs: a strategy of `threads` threads, the variables and
// a copy of their initial values, the fake rule keeping no rounding (0), a float32 one (1), a
// bfloat16 one (2) or a bfloat16 one in pairs of rows (3), and the summed gradient.
struct UpdateSetup {
  UpdateSetup(int threads, int rounding)
      : strategy(make_strategy(1, threads)),
        vars(make_variables(kSizes)),
        initial(make_variables(kSizes)),
        rule(/*rounding=*/rounding > 0, /*bfloat16_copy=*/rounding == 2, /*swappable=*/true,
             /*paired=*/rounding == 3),
        layout(vars, threads),
        update(layout, vars, rule, strategy->task_pool().total_threads()),
        g(flat_sum(layout)) {}
  std::unique_ptr<Strategy> strategy;
  std::vector<Variable> vars;
  const std::vector<Variable> initial;
  FakeUpdate rule;
  ChunkLayout layout;
  BufferedUpdate update;
  std::vector<float> g;
};

// In place: the chunks read and write the current buffers, nothing flips, the phase allows no
// backups, and the values are those of the update out of place — with and without the rule's
// rounding, and with the stores streamed.
TEST(BufferedUpdate, UpdatesInPlaceWithTheValuesOfOutOfPlace) {
  const StreamSharedReadsRestored restore;
  for (bool stream : {true, false}) {
    BufferedUpdate::set_stream_shared_reads(stream);
    for (int threads : {1, 2, 3}) {
      for (int rounding : {0, 1, 2, 3}) {  // none, float32, bfloat16, bfloat16 in pairs of rows
        SCOPED_TRACE(::testing::Message() << (stream ? "streamed, " : "stored, ") << threads
                                          << " threads, rounding " << rounding);
        UpdateSetup u(threads, rounding);
        auto& [strategy, vars, initial, rule, layout, update, g] = u;
        const float* before = vars[0].raw_value().data<float>();
        const float* slot_before = rule.slot(0).raw_value().data<float>();
        update.begin_update({}, /*in_place=*/true);
        TaskPhase& phase = update.phase_from_sum(g.data());
        EXPECT_FALSE(phase.allows_backups());
        strategy->task_pool().run(phase);
        update.end_update();
        EXPECT_EQ(vars[0].raw_value().data<float>(), before)
            << "the weights stayed where they were";
        EXPECT_EQ(rule.slot(0).raw_value().data<float>(), slot_before);
        EXPECT_EQ(strategy->task_pool().stats().backups, 0u);
        expect_updated(vars, initial, rule, layout, g, /*rounding=*/rounding > 0);
        EXPECT_TRUE(rule.padding_is_zero());
        EXPECT_EQ(g, flat_sum(layout)) << "the sum is read, not written";
        // The next update out of place again: its phase allows backups, and it flips.
        update.begin_update();
        EXPECT_TRUE(update.phase_from_sum(g.data()).allows_backups());
        strategy->task_pool().run(update.phase_from_sum(g.data()));
        update.end_update();
        EXPECT_NE(vars[0].raw_value().data<float>(), before);
        strategy->task_pool().wait_for_runs_before(UINT64_MAX);
      }
    }
  }
}

TEST(BufferedUpdate, StreamingStoresWriteTheSameBits) {
  for (bool bfloat16_copy : {false, true}) {
    SCOPED_TRACE(bfloat16_copy ? "bfloat16 copy" : "float32 copy");
    const size_t saved = BufferedUpdate::streaming_threshold();
    BufferedUpdate::set_streaming_threshold(0);
    auto strategy = make_strategy(1, 2);
    std::vector<Variable> vars = make_variables(kSizes);
    const std::vector<Variable> initial = make_variables(kSizes);
    FakeUpdate rule(/*rounding=*/true, bfloat16_copy);
    ChunkLayout layout(vars, 2);
    BufferedUpdate update(layout, vars, rule, strategy->task_pool().total_threads());
    BufferedUpdate::set_streaming_threshold(saved);
    std::vector<float> g = flat_sum(layout);
    update.begin_update();
    strategy->task_pool().run(update.phase_from_sum(g.data()));
    update.end_update();
    expect_updated(vars, initial, rule, layout, g, /*rounding=*/true);
    // A slow machine may back a chunk up (its result then goes through the spares): the same
    // values either way.
    strategy->task_pool().wait_for_runs_before(UINT64_MAX);
  }
}

// On several threads, with stream_shared_reads (the default on AMD CPUs), the first runs write
// what the replicas multiply by straight to the next buffers asking the rule to stream it: the
// weights (no rounding kept) or their rounding, float32 or bfloat16 (Streamed::rounded; the
// optimizers' streaming loops are OptimizerSumOfTwo's). Without it, or on one thread, nothing is
// streamed. The same values every way, on any CPU.
TEST(BufferedUpdate, ValuesTheReplicasReadAreStreamedOrStoredWithTheSameBits) {
  const StreamSharedReadsRestored restore;
  for (bool stream : {true, false}) {
    BufferedUpdate::set_stream_shared_reads(stream);
    for (int threads : {1, 2}) {
      for (int rounding : {0, 1, 2, 3}) {  // none, float32, bfloat16, bfloat16 in pairs of rows
        SCOPED_TRACE(::testing::Message() << (stream ? "streamed, " : "stored, ") << threads
                                          << " threads, rounding " << rounding);
        UpdateSetup u(threads, rounding);
        auto& [strategy, vars, initial, rule, layout, update, g] = u;
        update.begin_update();
        strategy->task_pool().run(update.phase_from_sum(g.data()));
        update.end_update();
        // A slow machine may back a chunk up (its result then goes through the spares): the
        // same values either way.
        expect_updated(vars, initial, rule, layout, g, /*rounding=*/rounding > 0);
        EXPECT_TRUE(rule.padding_is_zero());
        strategy->task_pool().wait_for_runs_before(UINT64_MAX);
        // Every chunk has a first run (a backup starts beside one); a rounding is asked to be
        // streamed only by first runs on several threads with streaming on.
        const bool asked = stream && rounding > 0 && strategy->task_pool().total_threads() > 1;
        EXPECT_EQ(rule.rounded_streamed.load() > 0, asked);
      }
    }
  }
}

// Chunk 1's first run never writes (it stands for a run still going when its backup won); the
// backup's result reaches the weights, slots and rounding through the spares — the rounding
// through a spare the rule swaps in when it can (first runs then write it directly, streamed
// when stream_shared_reads is on and the model fits in the caches), else copied by the winner.
// Beyond the caches (a streaming threshold of 0 here) first runs stream their weights and slots
// straight to the next buffers, and a backup's result takes the spares all the same.
void backup_published_through_the_spares(bool bfloat16_copy, bool swappable, bool stream,
                                         bool beyond_caches, bool paired = false) {
  BufferedUpdate::set_stream_shared_reads(stream);
  std::vector<Variable> vars = make_variables(kSizes);
  const std::vector<Variable> initial = make_variables(kSizes);
  FakeUpdate rule(/*rounding=*/true, bfloat16_copy, swappable, paired);
  ChunkLayout layout(vars, 1);
  const size_t saved = BufferedUpdate::streaming_threshold();
  if (beyond_caches) BufferedUpdate::set_streaming_threshold(0);
  BufferedUpdate update(layout, vars, rule, 2);
  BufferedUpdate::set_streaming_threshold(saved);
  std::vector<float> g = flat_sum(layout);
  for (int step = 0; step < 2; ++step) {
    update.begin_update();
    update.phase_from_sum(g.data());
    const int chunks = static_cast<int>(layout.chunks().size());
    for (int c = 0; c < chunks; ++c) {
      if (c == 1) continue;
      update.commit_chunk(c, update.run_chunk(c, 0, /*backup=*/false));
    }
    update.commit_chunk(1, update.run_chunk(1, 1, /*backup=*/true));
    update.end_update();
    EXPECT_EQ(update.backup_publishes(), static_cast<uint64_t>(step + 1));
    // One swap per update of the variable holding chunk 1, when the rounding is swapped.
    EXPECT_EQ(rule.swaps, swappable ? step + 1 : 0);
    if (step == 0) expect_updated(vars, initial, rule, layout, g, /*rounding=*/true);
  }
  // Twice: w = w0 - g, m = 2g.
  for (size_t v = 0; v < vars.size(); ++v) {
    for (int64_t j = 0; j < layout.size(v); ++j) {
      const float gj = g[static_cast<size_t>(layout.begin(v) + j)];
      const float w1 = initial[v].raw_value().data<float>()[j] - gj * 0.5f;
      ASSERT_EQ(vars[v].raw_value().data<float>()[j], w1 - gj * 0.5f);
      ASSERT_EQ(rule.slot(v).raw_value().data<float>()[j], gj + gj);
      ASSERT_EQ(rule.rounded(v, static_cast<size_t>(j)),
                static_cast<float>(bfloat16(w1 - gj * 0.5f)));
    }
  }
  EXPECT_TRUE(rule.padding_is_zero());
}

TEST(BufferedUpdate, AChunkWonByABackupIsPublishedThroughTheSpares) {
  const StreamSharedReadsRestored restore;
  for (bool beyond_caches : {false, true}) {
    for (bool stream : {true, false}) {
      for (bool swappable : {true, false}) {
        for (bool bfloat16_copy : {false, true}) {
          SCOPED_TRACE(std::string(beyond_caches ? "beyond the caches, " : "") +
                       (stream ? "streamed, " : "stored, ") +
                       (bfloat16_copy ? "bfloat16 copy" : "float32 copy") +
                       (swappable ? ", swappable" : ", copied by the winner"));
          backup_published_through_the_spares(bfloat16_copy, swappable, stream, beyond_caches);
        }
        SCOPED_TRACE(std::string(beyond_caches ? "beyond the caches, " : "") +
                     (stream ? "streamed, " : "stored, ") + "bfloat16 copy in pairs of rows" +
                     (swappable ? ", swappable" : ", copied by the winner"));
        backup_published_through_the_spares(true, swappable, stream, beyond_caches,
                                            /*paired=*/true);
      }
    }
  }
}

// The update summing the replicas' gradients per chunk reads what the reducer would have summed.
TEST(BufferedUpdate, SumsTheReplicasGradientsChunkByChunk) {
  for (int replicas : {1, 2, 3}) {
    auto strategy = make_strategy(replicas, 2);
    std::vector<Variable> vars = make_variables(kSizes);
    const std::vector<Variable> initial = make_variables(kSizes);
    FakeUpdate rule;
    ChunkLayout layout(vars, 2);
    GradientReducer reducer(layout, nullptr, nullptr, 0);
    ReplicaRuns runs(*strategy, vars, {});
    runs.begin_step({}, [](ReplicaContext& ctx, ReplicaRun& run, const Element&) {
      for (size_t v = 0; v < run.gradient_buffers().size(); ++v) {
        const Tensor& t = run.gradient_buffers()[v];
        for (int64_t j = 0; j < t.num_elements(); ++j)
          t.data<float>()[j] = gradient_value(ctx.local_replica_id(), v, j);
      }
      run.set_gradients(run.gradient_buffers());
    });
    ASSERT_TRUE(runs.run_as_tasks(false));
    BufferedUpdate update(layout, vars, rule, strategy->task_pool().total_threads());
    update.begin_update();
    strategy->task_pool().run(update.phase_summing(reducer.terms(runs.committed())));
    update.end_update();
    std::vector<float> g(static_cast<size_t>(layout.total()));
    for (const Chunk& c : layout.chunks())
      GradientReducer::sum_chunk(c, reducer.terms(runs.committed()), g.data() + c.flat);
    expect_updated(vars, initial, rule, layout, g);
    strategy->task_pool().wait_for_runs_before(UINT64_MAX);
  }
}

TEST(BufferedUpdate, RejectsAVariableThatIsNotFloat32) {
  std::vector<Variable> vars = {Variable(Tensor::zeros({3}, DType::float64), "d")};
  FakeUpdate rule;
  ChunkLayout layout(vars, 1);
  EXPECT_THROW(BufferedUpdate(layout, vars, rule, 1), InvalidArgument);
}

}  // namespace
}  // namespace lockstep::distribute
