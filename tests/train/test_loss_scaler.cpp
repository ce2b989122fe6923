// LossScaler against DeepSpeed's dynamic loss-scaling rules: start at 2^initial_scale_power,
// halve after `hysteresis` overflows (never below min_loss_scale), double after
// loss_scale_window clean steps; a fixed scale and disabled fp16 never move.
#include <gtest/gtest.h>

#include <cstdio>

#include "tierzero/train/loss_scaler.hpp"

using tierzero::train::LossScaleConfig;
using tierzero::train::LossScaler;

TEST(LossScaler, DynamicHalvesAfterHysteresisAndGrowsAfterWindow) {
  LossScaleConfig c;
  c.initial_scale_power = 4;  // 16
  c.hysteresis = 2;
  c.loss_scale_window = 3;
  c.min_loss_scale = 4;
  LossScaler s(c, true);
  EXPECT_TRUE(s.dynamic());
  EXPECT_EQ(s.scale(), 16.0);
  s.update(true);  // first overflow: tolerated (hysteresis 2)
  EXPECT_EQ(s.scale(), 16.0);
  s.update(true);  // second: halve
  EXPECT_EQ(s.scale(), 8.0);
  s.update(true);
  s.update(true);
  EXPECT_EQ(s.scale(), 4.0);
  s.update(true);
  s.update(true);
  EXPECT_EQ(s.scale(), 4.0) << "never below min_loss_scale";
  for (int i = 0; i < 3; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 8.0) << "doubles after loss_scale_window clean steps";
  s.update(false);
  s.update(true);  // resets the clean-step count
  s.update(false);
  s.update(false);
  EXPECT_EQ(s.scale(), 8.0);
  s.update(false);
  EXPECT_EQ(s.scale(), 16.0);
  EXPECT_EQ(s.skipped_steps(), 7);
}

TEST(LossScaler, ConsecutiveHysteresisCountsOnlyOverflowsInARow) {
  LossScaleConfig c;
  c.initial_scale_power = 4;  // 16
  c.hysteresis = 2;
  c.loss_scale_window = 100;
  for (bool consecutive : {false, true}) {
    c.consecutive_hysteresis = consecutive;
    LossScaler s(c, true);
    s.update(true);   // tolerated
    s.update(false);  // consecutive: the hysteresis is full again
    s.update(true);
    std::printf("consecutive_hysteresis %d: scale %g after overflow, clean, overflow\n",
                consecutive, s.scale());
    EXPECT_EQ(s.scale(), consecutive ? 16.0 : 8.0);
    s.update(true);
    EXPECT_EQ(s.scale(), 8.0) << "two in a row halve it either way";
  }
}

TEST(LossScaler, FixedScaleAndDisabled) {
  LossScaleConfig c;
  c.loss_scale = 128;
  LossScaler fixed(c, true);
  EXPECT_FALSE(fixed.dynamic());
  fixed.update(true);
  fixed.update(false);
  EXPECT_EQ(fixed.scale(), 128.0);
  LossScaler off(LossScaleConfig{}, false);
  EXPECT_EQ(off.scale(), 1.0);
}
