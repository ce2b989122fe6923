// BackwardUpdate: the optimizer step that runs during the backward
// (StoreConfig::optimizer_overlap). Once a unit's reduced gradient shard is final — its last
// micro-batch of the step reduced into host memory — the training thread hands the unit over here,
// and a worker thread updates it (its shard's AdamW, wherever its states live: host or NVMe) while
// the training thread goes on with the backward of earlier units. The step itself only waits for
// what is left (finish()).
//
// This class is only the queue, the thread and its accounting: what an update is comes from the
// store. An update that throws stops the worker; the error is rethrown on the training thread by
// the next push() or by finish(), so a failure is an Error there, never a hang. Internal to zero.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace tierzero::zero {

class BackwardUpdate {
 public:
  // `update(unit)` runs on the worker thread, one unit at a time, in the order pushed.
  explicit BackwardUpdate(std::function<void(size_t unit)> update);
  ~BackwardUpdate();  // closes the queue and joins (errors are logged)
  BackwardUpdate(const BackwardUpdate&) = delete;
  BackwardUpdate& operator=(const BackwardUpdate&) = delete;

  // Queues the unit's update, starting the worker (with the caller's OpenMP thread count) if it
  // is not running. Rethrows the worker's error, if it failed.
  void push(size_t unit);
  bool running() const { return thread_.joinable(); }
  // An update threw and the worker stopped; the next push() or finish() rethrows it.
  bool failed() const;
  // Waits until every queued update is done and ends the worker; returns the seconds the caller
  // waited. Rethrows the worker's error (every later update was dropped).
  double finish();

  // Seconds the worker spent updating since the last take_busy_seconds(), and the part of them
  // that ran before `until` (monotonic_seconds(); the rest ran after it).
  struct Busy {
    double total_s = 0.0;
    double before_s = 0.0;
  };
  Busy take_busy_seconds(double until);
  size_t take_units();  // units updated since the last call

 private:
  void run();

  std::function<void(size_t)> update_;
  std::thread thread_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<size_t> queue_;
  bool closed_ = false;
  std::exception_ptr error_;
  // (start, end) of each update since the last take_busy_seconds().
  std::deque<std::pair<double, double>> intervals_;
  size_t units_done_ = 0;
};

}  // namespace tierzero::zero
