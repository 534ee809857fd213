#include "distribute/step/load_streaks.h"

#include <gtest/gtest.h>

namespace lockstep::distribute {
namespace {

// A quiet machine's blip (one sample with another runnable thread) neither stops the spinning
// nor wakes the extras; a second busy sample in a row does both.
TEST(LoadStreaks, OneBusySampleIsABlipTwoInARowAreLoad) {
  LoadStreaks load;
  for (int i = 0; i < 3; ++i) load.add(0);
  EXPECT_EQ(load.others_for_spinning(), 0);
  EXPECT_FALSE(load.busy(false));

  load.add(1);
  EXPECT_EQ(load.others_for_spinning(), 0);
  EXPECT_FALSE(load.busy(false));
  load.add(0);
  EXPECT_EQ(load.others_for_spinning(), 0);

  load.add(2);
  EXPECT_EQ(load.others_for_spinning(), 0);
  load.add(1);
  EXPECT_EQ(load.others_for_spinning(), 1);
  EXPECT_TRUE(load.busy(false));
  load.add(3);
  EXPECT_EQ(load.others_for_spinning(), 3);
}

// Once busy, a quiet sample is the other process between two runs: the extras stay until ten
// quiet samples in a row, while the spinning follows each sample (a quiet one frees the core).
TEST(LoadStreaks, ABusyMachineStaysBusyUntilTenQuietSamplesInARow) {
  LoadStreaks load;
  load.add(1);
  load.add(1);
  ASSERT_TRUE(load.busy(false));
  for (int i = 0; i < 9; ++i) {
    load.add(0);
    EXPECT_TRUE(load.busy(true)) << "quiet sample " << i + 1;
    EXPECT_EQ(load.others_for_spinning(), 0);
  }
  load.add(1);  // the streak starts over
  EXPECT_EQ(load.others_for_spinning(), 0);
  for (int i = 0; i < 9; ++i) load.add(0);
  EXPECT_TRUE(load.busy(true));
  load.add(0);
  EXPECT_FALSE(load.busy(true));
}

}  // namespace
}  // namespace lockstep::distribute
