// The --metrics line stays valid JSON when a step's numbers are not finite: NaN and infinities
// (a diverged loss, an overflowed fp16 gradient norm) come out as null, where printf's "%g"
// wrote "nan" / "-nan" / "inf", which no JSON parser accepts.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>

#include "tierzero/train/step_metrics.hpp"

namespace tierzero::train {
namespace {

TEST(StepMetrics, NonFiniteValuesAreNullAndTheLineParses) {
  StepRecord r;
  r.step = 3;
  r.loss = -std::numeric_limits<double>::infinity();
  r.lr = 6e-4;
  r.grad_norm = -std::numeric_limits<double>::quiet_NaN();
  r.seconds = 0.125;
  r.tokens_per_second = std::numeric_limits<double>::infinity();
  r.prefetch_hits = 7;
  nn::TensorParallelTraffic tp;
  tp.all_reduce_bytes = 4096;
  const std::string text = step_metrics_json(r, tp, 0, 0).dump();
  char old_style[64];
  std::snprintf(old_style, sizeof old_style, "\"grad_norm\": %.9g", r.grad_norm);
  std::printf("line: %s\nprintf wrote: %s\n", text.c_str(), old_style);
  nlohmann::json back;
  ASSERT_NO_THROW(back = nlohmann::json::parse(text)) << text;
  EXPECT_TRUE(back.at("grad_norm").is_null());
  EXPECT_TRUE(back.at("loss").is_null());
  EXPECT_TRUE(back.at("tokens_per_s").is_null());
  EXPECT_EQ(back.at("step").get<int64_t>(), 3);
  EXPECT_DOUBLE_EQ(back.at("lr").get<double>(), 6e-4);
  EXPECT_DOUBLE_EQ(back.at("ms").get<double>(), 125.0);
  EXPECT_EQ(back.at("prefetch_hits").get<size_t>(), 7u);
  EXPECT_EQ(back.at("tp_all_reduce_bytes").get<size_t>(), 4096u);
  // What the line replaced was not JSON at all.
  EXPECT_FALSE(nlohmann::json::accept("{" + std::string(old_style) + "}"));
}

TEST(StepMetrics, FiniteValuesRoundTripExactly) {
  StepRecord r;
  r.step = 12;
  r.loss = 3.14159265358979;
  r.lr = 1.0 / 3.0;
  r.grad_norm = 0.7071067811865476;
  r.seconds = 1.5;
  const nlohmann::json back = nlohmann::json::parse(step_metrics_json(r, {}, 10, 2).dump());
  EXPECT_EQ(back.at("loss").get<double>(), r.loss);
  EXPECT_EQ(back.at("lr").get<double>(), r.lr);
  EXPECT_EQ(back.at("grad_norm").get<double>(), r.grad_norm);
  EXPECT_EQ(back.at("ulysses_all_to_all_bytes").get<size_t>(), 10u);
  EXPECT_EQ(back.at("ulysses_calls").get<size_t>(), 2u);
}

}  // namespace
}  // namespace tierzero::train
