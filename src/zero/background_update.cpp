// The background optimizer thread and its handshake with the training thread (see
// background_update.hpp).
#include "background_update.hpp"

#include <algorithm>
#include <string>

#include "tierzero/core/activity_log.hpp"
#include "tierzero/core/log.hpp"
#include "tierzero/core/timer.hpp"
#include "tierzero/kernels/cpu_ops.hpp"

namespace tierzero::zero {

BackgroundUpdate::BackgroundUpdate(size_t units, size_t staging_limit)
    : state_(units, State::done),
      handoff_(units),
      gradient_cleared_(units, 0),
      staging_limit_(std::max<size_t>(1, staging_limit)) {}

BackgroundUpdate::~BackgroundUpdate() {
  try {
    join();
  } catch (const std::exception& e) {
    log::error(std::string("the background optimizer step failed: ") + e.what());
  } catch (...) {
    log::error("the background optimizer step failed");
  }
}

void BackgroundUpdate::start(const std::vector<size_t>& units, std::function<void()> work) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t u : units) state_[u] = State::updating;
  }
  // The new thread starts with OpenMP's default of every core; it computes next to the training
  // thread, so it takes the training thread's count instead.
  auto run = [this, work = std::move(work), threads = kernels::cpu::threads()] {
    kernels::cpu::set_threads(threads);
    try {
      work();
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      error_ = std::current_exception();
      std::fill(state_.begin(), state_.end(), State::done);
      cv_.notify_all();
    }
  };
  try {
    thread_ = std::thread(std::move(run));
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::fill(state_.begin(), state_.end(), State::done);
    throw;
  }
}

void BackgroundUpdate::join() {
  if (thread_.joinable()) thread_.join();
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    std::swap(error, error_);
    // A handoff nobody fetched is stale once the next update runs (or the values are loaded).
    for (offload::PinnedBuffer& b : handoff_) b.reset();
    handoffs_held_ = 0;
  }
  if (error) std::rethrow_exception(error);
}

bool BackgroundUpdate::reached_locked(size_t unit, bool on_disk) const {
  const State s = state_[unit];
  return error_ != nullptr || (on_disk ? s == State::done : s != State::updating);
}

bool BackgroundUpdate::published(size_t unit) {
  if (!running()) return true;
  std::lock_guard<std::mutex> lock(mutex_);
  return reached_locked(unit, false);
}

double BackgroundUpdate::wait(size_t unit, bool on_disk) {
  if (!running()) return 0.0;
  std::unique_lock<std::mutex> lock(mutex_);
  auto reached = [&] { return reached_locked(unit, on_disk); };
  double waited = 0.0;
  if (!reached()) {
    const double t0 = monotonic_seconds();
    cv_.wait(lock, reached);
    const double t1 = monotonic_seconds();
    waited = t1 - t0;
    ActivityLog::global().record(Track::stall,
                                 on_disk ? "wait nvme optimizer write" : "wait nvme optimizer", t0,
                                 t1, 0, static_cast<int64_t>(unit));
  }
  if (error_) {
    lock.unlock();
    join();  // rethrows
  }
  return waited;
}

bool BackgroundUpdate::read_startable(size_t unit) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (handoff_[unit]) return true;  // taking it costs no buffer and no wait
  const bool on_disk = !thread_.joinable() || reached_locked(unit, true);
  return on_disk && handoffs_held_ + reads_in_flight_ < staging_limit_;
}

offload::PinnedBuffer BackgroundUpdate::take_staging(size_t unit) {
  std::lock_guard<std::mutex> lock(mutex_);
  offload::PinnedBuffer handed = std::move(handoff_[unit]);
  if (handed) --handoffs_held_;
  ++reads_in_flight_;
  return handed;
}

void BackgroundUpdate::read_finished() {
  std::lock_guard<std::mutex> lock(mutex_);
  --reads_in_flight_;
}

void BackgroundUpdate::mark_gradient_held(size_t unit) {
  std::lock_guard<std::mutex> lock(mutex_);
  gradient_cleared_[unit] = 0;
}

bool BackgroundUpdate::gradient_cleared_by_update(size_t unit) {
  std::lock_guard<std::mutex> lock(mutex_);
  return state_[unit] == State::updating || gradient_cleared_[unit];
}

bool BackgroundUpdate::reserve_handoff() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (handoffs_held_ + reads_in_flight_ >= staging_limit_) return false;
  ++handoffs_held_;
  return true;
}

void BackgroundUpdate::release_handoff() {
  std::lock_guard<std::mutex> lock(mutex_);
  --handoffs_held_;
}

void BackgroundUpdate::publish(size_t unit, offload::PinnedBuffer handoff, bool behind_forward) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (handoff) handoff_[unit] = std::move(handoff);
  if (!behind_forward) return;
  gradient_cleared_[unit] = 1;
  state_[unit] = State::published;
  cv_.notify_all();
}

void BackgroundUpdate::mark_on_disk(size_t unit) {
  std::lock_guard<std::mutex> lock(mutex_);
  state_[unit] = State::done;
  cv_.notify_all();
}

}  // namespace tierzero::zero
