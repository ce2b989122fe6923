// Learning-rate schedules follow DeepSpeed's definitions.
#include <gtest/gtest.h>

#include <cmath>

#include "tierzero/train/lr_schedule.hpp"

using namespace tierzero;
using namespace tierzero::train;

TEST(LrSchedule, WarmupCosine) {
  SchedulerConfig c;
  c.type = "WarmupCosineLR";
  c.warmup_num_steps = 10;
  c.total_num_steps = 110;
  c.warmup_min_ratio = 0.0;
  c.cos_min_ratio = 0.1;
  train::LrSchedule s(c, 1e-3, 0);
  EXPECT_NEAR(s.lr(0), 1e-4, 1e-12);                       // (0 + 1) / 10 of the peak
  EXPECT_NEAR(s.lr(9), 1e-3, 1e-12);                       // end of warmup
  EXPECT_NEAR(s.lr(10), 1e-3, 1e-12);                      // cosine starts at the peak
  EXPECT_NEAR(s.lr(60), 1e-3 * (0.1 + 0.9 * 0.5), 1e-12);  // half way
  EXPECT_NEAR(s.lr(110), 1e-4, 1e-12);                     // floor
  EXPECT_NEAR(s.lr(500), 1e-4, 1e-12);
  for (int i = 11; i < 110; ++i) EXPECT_LE(s.lr(i), s.lr(i - 1));
}

TEST(LrSchedule, WarmupLrAndDecayAndConstant) {
  SchedulerConfig c;
  c.type = "WarmupLR";
  c.warmup_num_steps = 4;
  c.warmup_min_lr = 0.0;
  c.warmup_max_lr = 0.01;
  train::LrSchedule w(c, 1.0, 100);
  EXPECT_NEAR(w.lr(1), 0.005, 1e-12);
  EXPECT_NEAR(w.lr(50), 0.01, 1e-12);
  c.type = "WarmupDecayLR";
  c.total_num_steps = 104;
  train::LrSchedule d(c, 1.0, 0);
  EXPECT_NEAR(d.lr(54), 0.005, 1e-12);
  EXPECT_NEAR(d.lr(104), 0.0, 1e-12);
  c.type = "none";
  train::LrSchedule n(c, 0.3, 10);
  EXPECT_EQ(n.lr(0), 0.3);
  c.type = "WarmupLR";
  c.warmup_type = "log";
  c.warmup_max_lr = 1.0;
  train::LrSchedule l(c, 1.0, 10);
  EXPECT_NEAR(l.lr(1), std::log(2.0) / std::log(4.0), 1e-12);
}
