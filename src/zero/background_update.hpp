// BackgroundUpdate: the optimizer step that runs on its own thread behind the next forward (the
// NVMe pipeline at stage 3 on the CPU backend), and the handshake between it and the training
// thread. Per unit it records how far the update has got — updating (not computed yet),
// published (new values visible to fetches; NVMe writes may still be in flight), done (on disk) —
// and holds the new parameter shard it hands to the next fetch (a handoff), so that fetch reads
// nothing back from NVMe. Handoffs and NVMe parameter reads in flight share one staging budget,
// counted under the same lock by both sides so they never overshoot it together. The fetcher
// waits here before it touches a unit's parameters, the reducer before it adds into a gradient
// shard the update still has to read. Internal to the zero layer.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "tierzero/offload/host_pool.hpp"

namespace tierzero::zero {

class BackgroundUpdate {
 public:
  // `staging_limit`: parameter shards that NVMe reads in flight and handoffs may hold at once.
  BackgroundUpdate(size_t units, size_t staging_limit);
  ~BackgroundUpdate();  // joins (errors are logged)
  BackgroundUpdate(const BackgroundUpdate&) = delete;
  BackgroundUpdate& operator=(const BackgroundUpdate&) = delete;

  // ---- the training thread starts and ends it
  // Marks `units` updating and runs `work` on a new thread with the caller's OpenMP thread count.
  // An exception `work` throws marks every unit done and is rethrown by join() and by any wait.
  void start(const std::vector<size_t>& units, std::function<void()> work);
  bool running() const { return thread_.joinable(); }
  // Waits for the thread; drops unused handoffs (stale once the values change); rethrows its error.
  void join();

  // ---- the training thread's questions (none blocks unless it says so)
  bool published(size_t unit);  // the update's new values are visible (or nothing runs)
  // Blocks until the unit's update is published (on_disk: also written to NVMe); returns the
  // seconds it waited. Rethrows the background error (after joining).
  double wait(size_t unit, bool on_disk);
  // An NVMe read of the unit's parameter shard could start now: its handoff is there (no read
  // needed), or its update is on disk and the staging budget has room.
  bool read_startable(size_t unit);
  // Takes the unit's handoff (empty when there is none) and counts one staging buffer in use
  // (the handoff, or the read the caller starts instead) until read_finished().
  offload::PinnedBuffer take_staging(size_t unit);
  void read_finished();
  // The unit's gradient shard holds a gradient again (the reducer added to it).
  void mark_gradient_held(size_t unit);
  // The unit's gradient shard need not be zeroed by the training thread: the update will clear
  // it after reading (updating), or already cleared it and nothing was added since.
  bool gradient_cleared_by_update(size_t unit);

  // ---- the background thread's side
  // Counts a handoff against the staging budget when there is room.
  bool reserve_handoff();
  void release_handoff();  // a reserved handoff that is not delivered after all
  // Every chunk of the unit is updated. `handoff` (may be empty) is its new parameter shard for
  // the next fetch. Behind the forward (on the thread start() runs) this also makes the new
  // values visible, and says the update zeroed the unit's gradient shard after reading it.
  void publish(size_t unit, offload::PinnedBuffer handoff, bool behind_forward);
  void mark_on_disk(size_t unit);  // behind the forward: the unit's update is written too

 private:
  enum class State : uint8_t { done, updating, published };
  bool reached_locked(size_t unit, bool on_disk) const;

  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<State> state_;                    // per unit
  std::vector<offload::PinnedBuffer> handoff_;  // per unit: (shard_numel) working type
  std::vector<char> gradient_cleared_;          // per unit
  size_t staging_limit_;
  size_t handoffs_held_ = 0;
  size_t reads_in_flight_ = 0;
  std::exception_ptr error_;
};

}  // namespace tierzero::zero
