// ActivityLog's busy time is the union of a track's intervals whatever order they are recorded in
// (a device timeline records a step's spans at its end, a pipeline its sends when it sees them
// done): late, overlapping, nested and touching records, against the union computed apart.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <utility>
#include <vector>

#include "tierzero/core/activity_log.hpp"

using namespace tierzero;

namespace {

double busy(const ActivityLog& log, Track t) {
  return log.totals()[static_cast<size_t>(t)].busy_s;
}

// The length of the union of the intervals, by sorting them.
double union_length(std::vector<std::pair<double, double>> v) {
  std::sort(v.begin(), v.end());
  double total = 0.0, lo = 0.0, hi = -1.0;
  for (const auto& [s, e] : v) {
    if (s > hi) {
      if (hi > lo) total += hi - lo;
      lo = s;
      hi = e;
    } else {
      hi = std::max(hi, e);
    }
  }
  if (hi > lo) total += hi - lo;
  return total;
}

}  // namespace

TEST(ActivityLog, BusyTimeIsTheUnionInWhateverOrderRecorded) {
  ActivityLog log;
  // A host record from 10 to 20, then (flushed later) device spans before and inside it.
  log.record(Track::collective, "broadcast", 10.0, 20.0);
  log.record(Track::collective, "reduce_scatter", 2.0, 4.0);  // before it: counts whole
  log.record(Track::collective, "all_gather", 12.0, 14.0);    // inside it: counts nothing
  log.record(Track::collective, "all_reduce", 19.0, 23.0);    // overlapping its end: 3 more
  log.record(Track::collective, "all_gather", 3.0, 11.0);     // bridging two: 6 more
  log.record(Track::collective, "send", 23.0, 24.0);          // touching: 1 more
  EXPECT_DOUBLE_EQ(busy(log, Track::collective), 22.0);       // [2, 24)
  EXPECT_DOUBLE_EQ(busy(log, Track::compute), 0.0);
  log.reset();
  EXPECT_DOUBLE_EQ(busy(log, Track::collective), 0.0);
  log.record(Track::collective, "again", 2.0, 4.0);  // nothing remembered across a reset
  EXPECT_DOUBLE_EQ(busy(log, Track::collective), 2.0);
}

TEST(ActivityLog, BusyTimeOfShuffledRecordsIsTheirUnion) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> start(100.0, 200.0), length(0.0, 3.0);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<std::pair<double, double>> v;
    for (int i = 0; i < 300; ++i) {
      const double s = start(rng);
      v.emplace_back(s, s + length(rng));
    }
    ActivityLog log;
    for (const auto& [s, e] : v) log.record(Track::host_to_device, "copy", s, e, 8);
    const double want = union_length(v);
    const double got = busy(log, Track::host_to_device);
    if (trial == 0)
      std::printf("300 shuffled intervals: busy %.9f s, their union %.9f s, seconds %.3f\n", got,
                  want, log.totals()[static_cast<size_t>(Track::host_to_device)].seconds);
    EXPECT_NEAR(got, want, 1e-9 * want);
    EXPECT_EQ(log.totals()[static_cast<size_t>(Track::host_to_device)].bytes, 300u * 8u);
  }
}
