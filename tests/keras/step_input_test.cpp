// StepInput (src/keras/engine/step_input.h): every run of a replica's task in a step — the first
// and a backup — gets what the first pull of that step got: the same element, or the same error.
// The pipeline here counts its pulls, so a second pull for a step shows.
#include "keras/engine/step_input.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "lockstep/core/error.h"
#include "lockstep/core/tensor.h"

namespace lockstep::keras {
namespace {

// A pipeline whose pull k (from 1) yields the scalar k, except that pull `bad` throws DataLoss.
struct CountingPipeline {
  int pulls = 0;
  int bad = -1;
  Element pull() {
    ++pulls;
    if (pulls == bad) throw DataLoss("corrupt record at pull " + std::to_string(pulls));
    return {Tensor::scalar(static_cast<float>(pulls))};
  }
};

float value(const Element& e) {
  return e[0].data<float>()[0];
}

TEST(StepInput, EveryRunOfAStepGetsTheFirstPullsElement) {
  CountingPipeline p;
  StepInput in;
  auto pull = [&] { return p.pull(); };
  EXPECT_EQ(value(in.get(0, pull)), 1.0f);
  EXPECT_EQ(value(in.get(0, pull)), 1.0f);  // a backup run of step 0
  EXPECT_EQ(p.pulls, 1);
  EXPECT_EQ(value(in.get(1, pull)), 2.0f);
  EXPECT_EQ(p.pulls, 2);
}

TEST(StepInput, AFailedPullFailsEveryRunOfItsStepWithoutPullingAgain) {
  CountingPipeline p{.bad = 2};
  StepInput in;
  auto pull = [&] { return p.pull(); };
  EXPECT_EQ(value(in.get(0, pull)), 1.0f);
  for (int run = 0; run < 2; ++run) {  // the first run of step 1, then its backup
    try {
      in.get(1, pull);
      FAIL() << "run " << run << " of step 1 returned an element";
    } catch (const DataLoss& e) {
      EXPECT_STREQ(e.what(), "DataLoss: corrupt record at pull 2");
    }
  }
  // The backup did not pull the element after the corrupt one.
  EXPECT_EQ(p.pulls, 2);
  // The next step pulls on.
  EXPECT_EQ(value(in.get(2, pull)), 3.0f);
}

}  // namespace
}  // namespace lockstep::keras
