// The optimizer's worker during the backward (see backward_update.hpp).
#include "backward_update.hpp"

#include <algorithm>
#include <string>
#include <utility>

#include "tierzero/core/log.hpp"
#include "tierzero/core/timer.hpp"
#include "tierzero/kernels/cpu_ops.hpp"

namespace tierzero::zero {

BackwardUpdate::BackwardUpdate(std::function<void(size_t)> update) : update_(std::move(update)) {}

BackwardUpdate::~BackwardUpdate() {
  try {
    finish();
  } catch (const std::exception& e) {
    log::error(std::string("the optimizer step during the backward failed: ") + e.what());
  } catch (...) {
    log::error("the optimizer step during the backward failed");
  }
}

void BackwardUpdate::push(size_t unit) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!error_) {
      queue_.push_back(unit);
      cv_.notify_all();
    }
  }
  bool failed = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    failed = error_ != nullptr;
  }
  if (failed) {
    finish();  // rethrows
    return;
  }
  if (running()) return;
  closed_ = false;
  // The new thread starts with OpenMP's default of every core; it computes next to the training
  // thread, so it takes the training thread's count instead.
  thread_ = std::thread([this, threads = kernels::cpu::threads()] {
    kernels::cpu::set_threads(threads);
    run();
  });
}

void BackwardUpdate::run() {
  for (;;) {
    size_t unit = 0;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return !queue_.empty() || closed_; });
      if (queue_.empty()) return;
      unit = queue_.front();
      queue_.pop_front();
    }
    const double t0 = monotonic_seconds();
    try {
      update_(unit);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      error_ = std::current_exception();
      queue_.clear();  // nothing after a failed update runs
      return;
    }
    const double t1 = monotonic_seconds();
    std::lock_guard<std::mutex> lock(mutex_);
    intervals_.emplace_back(t0, t1);
    ++units_done_;
  }
}

bool BackwardUpdate::failed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return error_ != nullptr;
}

double BackwardUpdate::finish() {
  double waited = 0.0;
  if (thread_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      closed_ = true;
      cv_.notify_all();
    }
    const double t0 = monotonic_seconds();
    thread_.join();
    waited = monotonic_seconds() - t0;
  }
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    std::swap(error, error_);
    queue_.clear();
    closed_ = false;
  }
  if (error) std::rethrow_exception(error);
  return waited;
}

BackwardUpdate::Busy BackwardUpdate::take_busy_seconds(double until) {
  std::lock_guard<std::mutex> lock(mutex_);
  Busy b;
  for (const auto& [t0, t1] : intervals_) {
    b.total_s += t1 - t0;
    b.before_s += std::max(0.0, std::min(t1, until) - t0);
  }
  intervals_.clear();
  return b;
}

size_t BackwardUpdate::take_units() {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::exchange(units_done_, 0);
}

}  // namespace tierzero::zero
