// BackwardUpdate, the optimizer's worker during the backward: units are updated in the order
// queued, beside the caller; an update that throws surfaces on the caller's thread (at the next
// push or at finish) as that error, never as a hang; busy time is split at a given instant.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "backward_update.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/timer.hpp"

namespace tierzero::zero {
namespace {

TEST(BackwardUpdate, UpdatesInOrderBesideTheCaller) {
  std::vector<size_t> seen;  // written by the worker only, read after finish()
  BackwardUpdate worker([&](size_t u) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    seen.push_back(u);
  });
  for (size_t u : {5, 3, 4, 0}) worker.push(u);
  EXPECT_TRUE(worker.running());
  worker.finish();
  EXPECT_FALSE(worker.running());
  EXPECT_EQ(seen, (std::vector<size_t>{5, 3, 4, 0}));
  EXPECT_EQ(worker.take_units(), 4u);
  EXPECT_EQ(worker.take_units(), 0u);
  // A second round starts a new worker.
  worker.push(1);
  worker.finish();
  EXPECT_EQ(seen.back(), 1u);
}

TEST(BackwardUpdate, AnErrorSurfacesAtTheNextPushOrAtFinish) {
  std::atomic<int> ran{0};
  BackwardUpdate worker([&](size_t u) {
    ++ran;
    if (u == 2) TZ_THROW("update of unit 2 failed", "injected by the test");
  });
  worker.push(1);
  worker.push(2);
  worker.push(3);  // dropped: nothing runs after a failed update
  try {
    worker.finish();
    FAIL() << "finish() did not rethrow the worker's error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("update of unit 2 failed"), std::string::npos) << e.what();
  }
  EXPECT_EQ(ran.load(), 2);
  // The error was taken: the worker is usable again.
  worker.push(4);
  EXPECT_NO_THROW(worker.finish());

  // At the next push: the worker fails while the caller is elsewhere.
  worker.push(2);
  // Until the worker has recorded its error (a fixed sleep lost that race on a loaded machine).
  for (int i = 0; i < 10000 && !worker.failed(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(worker.failed());
  EXPECT_EQ(ran.load(), 4);
  EXPECT_THROW(worker.push(5), Error);
  EXPECT_FALSE(worker.running());
  EXPECT_NO_THROW(worker.finish());
}

TEST(BackwardUpdate, BusyTimeSplitsAtAnInstant) {
  BackwardUpdate worker([](size_t) { std::this_thread::sleep_for(std::chrono::milliseconds(20)); });
  worker.push(0);
  worker.finish();
  const double between = monotonic_seconds();
  worker.push(1);
  worker.finish();
  const BackwardUpdate::Busy busy = worker.take_busy_seconds(between);
  std::printf("busy %.4f s, of which %.4f s before the instant\n", busy.total_s, busy.before_s);
  EXPECT_GE(busy.total_s, 0.039);
  EXPECT_GE(busy.before_s, 0.019);
  EXPECT_LT(busy.before_s, busy.total_s - 0.015);
  EXPECT_EQ(worker.take_busy_seconds(between).total_s, 0.0);
}

}  // namespace
}  // namespace tierzero::zero
