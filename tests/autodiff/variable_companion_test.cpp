// Variable::Companion: the state a higher layer keeps beside a variable is told of every write the
// variable sees, with the buffer it concerns, and the first companion attached is the one kept.
#include <gtest/gtest.h>

#include <memory>
#include <thread>
#include <vector>

#include "lockstep/autodiff/variable.h"

namespace lockstep {
namespace {

struct Recorder : Variable::Companion {
  std::vector<std::pair<char, int>> events;  // ('a', buffer) assigned, ('f', buffer) flipped
  void value_assigned(int buffer) override { events.emplace_back('a', buffer); }
  void buffers_flipped(int buffer) override { events.emplace_back('f', buffer); }
};

TEST(VariableCompanion, IsToldOfEveryWriteWithItsBuffer) {
  Variable v(Tensor::zeros({4}, DType::float32), "w");
  EXPECT_EQ(v.companion(), nullptr);
  auto& rec = static_cast<Recorder&>(v.attach_companion(std::make_unique<Recorder>()));
  EXPECT_EQ(v.companion(), &rec);
  v.assign(Tensor::full({4}, 1.0, DType::float32));
  v.enable_next_buffer();
  v.flip_buffers();
  EXPECT_EQ(v.current_buffer(), 1);
  v.assign_add(Tensor::full({4}, 1.0, DType::float32));
  v.flip_buffers();
  v.assign_sub(Tensor::full({4}, 1.0, DType::float32));
  const std::vector<std::pair<char, int>> expected = {
      {'a', 0}, {'f', 1}, {'a', 1}, {'f', 0}, {'a', 0}};
  EXPECT_EQ(rec.events, expected);
}

TEST(VariableCompanion, TheFirstAttachedStaysAndHandlesShareIt) {
  Variable v(Tensor::zeros({4}, DType::float32), "w");
  Variable alias = v;
  std::vector<Variable::Companion*> got(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < got.size(); ++t) {
    threads.emplace_back(
        [&, t] { got[t] = &alias.attach_companion(std::make_unique<Recorder>()); });
  }
  for (auto& t : threads) t.join();
  for (Variable::Companion* c : got) EXPECT_EQ(c, got[0]);
  EXPECT_EQ(v.companion(), got[0]);
  EXPECT_THROW(v.attach_companion(nullptr), InvalidArgument);
}

}  // namespace
}  // namespace lockstep
