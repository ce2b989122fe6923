// The MPI backend. Each MpiCommunicator owns a duplicate MPI communicator and one engine thread.
// Every operation is a non-blocking MPI call (MPI_Iallgather, MPI_Ireduce_scatter_block, ...,
// MPI_Isend/Irecv) followed by MPI_Test polling against the operation's deadline:
//  - asynchronous operations are started and polled by the engine, in issue order, so they
//    progress while the caller computes (Open MPI progresses non-blocking collectives only inside
//    MPI calls, and has no progress thread of its own);
//  - a blocking call with nothing else pending runs on the caller's thread the same way, with no
//    hand-off to the engine, which is what keeps large transfers at raw MPI speed.
// The caller never blocks inside MPI (only split(), which has no non-blocking form, blocks the
// engine), so a dead or stalled peer becomes an Error at the deadline instead of a hang.
// bf16/fp16 reductions are widened to fp32, reduced in fp32 by MPI and rounded once: MPI has no
// 16-bit float type, and a user-defined MPI_Op on 16-bit data would round after every pairwise
// step. Device buffers are staged through host scratch unless MPI is CUDA-aware and no widening
// or scaling is needed. Collectives run one at a time per communicator (they share the scratch);
// point-to-point operations overlap them. An operation with a ready event (Communicator) is not
// started before that event completes, and nothing issued after it starts before it: every rank
// must start its collectives in the same order.
#include "tierzero/comm/mpi_communicator.hpp"

#include <mpi.h>
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

#include "comm_internal.hpp"
#include "mpi_check.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/log.hpp"
#include "tierzero/core/timer.hpp"
#include "tierzero/device/device.hpp"

namespace tierzero::comm {

namespace {

using Clock = std::chrono::steady_clock;
using comm_detail::HostScratch;

MPI_Datatype wire_type(DType t) {
  // 16-bit floats travel as raw 16-bit words; only reductions need their value.
  return t == DType::f32 ? MPI_FLOAT : MPI_UINT16_T;
}

int mpi_count(size_t count, const std::string& what) {
  TZ_CHECK(count <= static_cast<size_t>(INT_MAX),
           what + ": " + std::to_string(count) + " elements exceed MPI's int count",
           "split the transfer into buckets of at most 2^31-1 elements");
  return static_cast<int>(count);
}

// One issued operation: what it is, how it is started and finished, and its completion state.
class MpiOp final : public comm_detail::PendingOp {
 public:
  MpiOp(std::string what, double timeout_s, bool is_collective)
      : collective(is_collective),
        what_(std::move(what)),
        timeout_s_(timeout_s),
        deadline_(Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(timeout_s))) {}

  const bool collective;               // collectives run one at a time per communicator
  std::function<MPI_Request()> start;  // stages/widens the input, posts the MPI request
  std::function<void()> finish;        // after completion: scale, narrow, copy back
  std::function<void()> run;           // instead of start/finish: a blocking call (split)
  const std::string& what() const { return what_; }

  // The operation starts once `event` has completed (null: at once).
  void set_ready(Event* event) {
    ready_ = event;
    awaiting_ready_ = event != nullptr;
  }

  // Throws when the deadline has passed or another operation of this process failed.
  void check_deadline() const {
    if (Clock::now() >= deadline_) {
      // Said the same way whichever thread notices first: the caller waiting, or the engine.
      if (awaiting_ready_) comm_detail::throw_ready_timeout(what_, timeout_s_);
      comm_detail::throw_timeout(what_, timeout_s_);
    }
    if (comm_failed()) comm_detail::throw_after_failure(what_);
  }

  // True once the operation may start: it has no ready event, or the event has completed. Never
  // blocks. Throws when the deadline passes first (the event is as good as a stalled peer), when
  // the work before the event failed, or when another operation of this process failed.
  // Called by the one thread that starts the operation (the engine, or the caller in execute()).
  bool ready_to_start() {
    if (ready_ == nullptr) return true;
    bool complete = false;
    try {
      complete = ready_->query();
    } catch (const Error& e) {
      TZ_THROW(what_ + " not started: the work before its ready event failed: " + e.what(),
               "the first error above says what failed on this rank");
    }
    if (complete) {
      ready_ = nullptr;  // not asked again
      awaiting_ready_ = false;
      return true;
    }
    check_deadline();
    return false;
  }

  void complete(std::exception_ptr error) {
    if (error) comm_detail::mark_failed();
    const double now = monotonic_seconds();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      completed_s_ = now;
      done_ = true;
      error_ = std::move(error);
    }
    cv_.notify_all();
  }

  bool test() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (done_) {
        if (error_) std::rethrow_exception(error_);
        return true;
      }
    }
    check_deadline();
    return false;
  }

  void wait() override {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!done_) {
      lock.unlock();
      check_deadline();
      lock.lock();
      // Wake now and then to notice a failure elsewhere in the process.
      cv_.wait_until(lock, std::min(deadline_, Clock::now() + std::chrono::milliseconds(100)));
    }
    if (error_) std::rethrow_exception(error_);
  }

  double completed_s() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return done_ ? completed_s_ : -1.0;
  }

 private:
  std::string what_;
  double timeout_s_;
  Clock::time_point deadline_;
  Event* ready_ = nullptr;                   // starting thread only
  std::atomic<bool> awaiting_ready_{false};  // read by waiters too
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  double completed_s_ = -1.0;  // monotonic_seconds() at complete()
  std::exception_ptr error_;
};

// The host side of one user buffer for one operation: the buffer itself when MPI can use it,
// otherwise a staging copy in scratch.
struct HostSide {
  void* host = nullptr;  // what MPI reads or writes
  void* user = nullptr;  // the caller's buffer
  size_t bytes = 0;
  bool staged = false;
};

HostSide stage(const void* user, size_t bytes, bool on_device, bool copy_in, HostScratch& scratch) {
  HostSide h{const_cast<void*>(user), const_cast<void*>(user), bytes, false};
  if (!on_device || bytes == 0) return h;
  h.host = scratch.get(bytes);
  h.staged = true;
  if (copy_in) comm_detail::copy_device_to_host(h.host, user, bytes);
  return h;
}

void unstage(const HostSide& h) {
  if (h.staged) comm_detail::copy_host_to_device(h.user, h.host, h.bytes);
}

void scale(float* x, size_t n, int ranks) {  // x (n)
  const auto d = static_cast<float>(ranks);
  for (size_t i = 0; i < n; ++i) x[i] /= d;
}

// What an operation keeps between start and finish.
struct Staged {
  HostSide send;
  HostSide recv;
  float* recv32 = nullptr;  // (recv count) fp32 result before scaling/narrowing
};

int g_world_rank = -1;
// More ranks on this node than cores: a polling thread must yield, or the ranks it waits for
// cannot run. Otherwise it spins, as MPI's own blocking calls do (yielding then only hands the
// core to unrelated processes and costs bandwidth).
bool g_oversubscribed = true;

// Waiting for a ready event while nothing else is in flight: short sleeps, growing to this, so
// that an engine (or a caller) waiting for a producer does not take a core from it.
constexpr std::chrono::microseconds kMaxReadyBackoff{200};

// Sleeps a little longer each time it is called, up to kMaxReadyBackoff.
class Backoff {
 public:
  void pause() {
    std::this_thread::sleep_for(delay_);
    delay_ = std::min(delay_ * 2, kMaxReadyBackoff);
  }
  void reset() { delay_ = std::chrono::microseconds(5); }

 private:
  std::chrono::microseconds delay_{5};
};

}  // namespace

struct MpiCommunicator::Engine {
  Engine(MPI_Comm c) : comm(c) {
    thread = std::thread([this] { loop(); });
  }
  ~Engine() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stop = true;
    }
    cv.notify_all();
    if (comm_failed()) {
      // A request may still be posted with a peer that is gone; joining could wait forever. The
      // process is about to abort (abort_job / MpiSession), which ends the thread too.
      thread.detach();
      return;
    }
    thread.join();
    (void)MPI_Comm_free(&comm);  // failure to free at shutdown is not worth an error
  }

  void submit(std::shared_ptr<MpiOp> op) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      queue.push_back(std::move(op));
      ++pending;
    }
    cv.notify_one();
  }

  // A blocking call: on this thread when nothing else is pending (operations of a communicator
  // are issued from one thread, so nothing can be submitted meanwhile), else through the queue
  // behind the pending ones, which keeps issue order.
  void execute(const std::shared_ptr<MpiOp>& op) {
    bool idle = false;
    {
      std::lock_guard<std::mutex> lock(mutex);
      idle = pending == 0;
    }
    if (!idle) {
      submit(op);
      op->wait();
      return;
    }
    try {
      // The caller's thread is the engine here: it waits for the ready event, under the deadline.
      for (Backoff backoff; !op->ready_to_start();) backoff.pause();
      if (op->run) {
        op->run();
        return;
      }
      MPI_Request request = op->start();
      int flag = 0;
      for (int polls = 0;; ++polls) {
        TZ_MPI_CHECK(MPI_Test(&request, &flag, MPI_STATUS_IGNORE), op->what());
        if (flag) break;
        op->check_deadline();
        if (g_oversubscribed && polls > 100) std::this_thread::yield();
      }
      if (op->finish) op->finish();
    } catch (...) {
      comm_detail::mark_failed();  // the group is now out of step: nothing later can succeed
      throw;
    }
  }

  void loop() {
    Backoff backoff;
    for (;;) {
      std::shared_ptr<MpiOp> next;
      {
        std::unique_lock<std::mutex> lock(mutex);
        if (in_flight.empty()) cv.wait(lock, [this] { return stop || !queue.empty(); });
        if (in_flight.empty() && queue.empty()) return;  // stopped, and everything is done
        // Collectives one at a time (they share the scratch); point-to-point at once. Only this
        // thread pops, so the front stays the front while its ready event is asked below.
        if (!queue.empty() && (!queue.front()->collective || !collective_in_flight)) {
          next = queue.front();
        }
      }
      bool waiting_for_ready = false;
      if (next) {
        // The front starts once its ready event has completed; what was issued after it waits
        // behind it, so that operations start in issue order on every rank.
        bool ready = false;
        std::exception_ptr error;
        try {
          ready = next->ready_to_start();
        } catch (...) {
          error = std::current_exception();
        }
        if (ready || error) {
          {
            std::lock_guard<std::mutex> lock(mutex);
            queue.pop_front();
          }
          if (error) {
            done(next, error);
          } else {
            begin(next);
          }
          backoff.reset();
          continue;
        }
        waiting_for_ready = true;
      }
      if (poll()) {
        backoff.reset();
      } else if (waiting_for_ready && in_flight.empty()) {
        backoff.pause();  // only a producer to wait for: leave it the core
      } else {
        std::this_thread::yield();  // nothing finished: let ranks sharing this core run
      }
    }
  }

  void begin(const std::shared_ptr<MpiOp>& op) {
    try {
      if (op->run) {
        op->run();
        done(op, nullptr);
        return;
      }
      in_flight.push_back({op, op->start()});
      if (op->collective) collective_in_flight = true;
    } catch (...) {
      done(op, std::current_exception());
    }
  }

  // Tests every posted request once; true when one completed.
  bool poll() {
    bool any = false;
    for (size_t i = 0; i < in_flight.size();) {
      auto [op, request] = in_flight[i];
      int flag = 0;
      std::exception_ptr error;
      try {
        TZ_MPI_CHECK(MPI_Test(&in_flight[i].second, &flag, MPI_STATUS_IGNORE), op->what());
        if (!flag) op->check_deadline();
        if (flag && op->finish) op->finish();
      } catch (...) {
        error = std::current_exception();
      }
      if (flag || error) {
        if (op->collective) collective_in_flight = false;
        in_flight.erase(in_flight.begin() + static_cast<std::ptrdiff_t>(i));
        done(op, error);
        any = true;
      } else {
        ++i;
      }
    }
    return any;
  }

  void done(const std::shared_ptr<MpiOp>& op, std::exception_ptr error) {
    op->complete(std::move(error));
    std::lock_guard<std::mutex> lock(mutex);
    --pending;
  }

  MPI_Comm comm;
  std::thread thread;
  std::mutex mutex;
  std::condition_variable cv;
  std::deque<std::shared_ptr<MpiOp>> queue;  // issued, not yet started
  size_t pending = 0;                        // issued through the queue, not yet complete
  bool stop = false;
  // Engine thread only (and the caller's thread in execute(), when nothing is pending):
  std::vector<std::pair<std::shared_ptr<MpiOp>, MPI_Request>> in_flight;  // posted requests
  bool collective_in_flight = false;
  // node_local_rank() / node_local_size(), once asked (a collective the first time):
  std::mutex node_mutex;
  bool node_known = false;
  int node_rank = 0;
  int node_size = 0;
  HostScratch send_stage{"comm send staging"};
  HostScratch recv_stage{"comm recv staging"};
  HostScratch send_wide{"comm fp32 send"};
  HostScratch recv_wide{"comm fp32 recv"};
};

// --- MpiSession and process-level helpers ---

namespace {

// MPI's start-up (MPI_Init_thread, the world's MPI_Comm_dup) can block for ever when a rank
// cannot reach the others (a firewall, the wrong network interface): Open MPI prints that it will
// abort and then does not. No TierZero timeout applies inside MPI, so a watchdog thread ends the
// process, with a message, if start-up has not finished within the communication timeout; every
// rank has one, so the launcher sees every rank fail.
class StartupWatchdog {
 public:
  explicit StartupWatchdog(double timeout_s) {
    if (!(timeout_s > 0.0)) return;
    thread_ = std::thread([this, timeout_s] {
      std::unique_lock<std::mutex> lock(mutex_);
      if (done_.wait_for(lock, std::chrono::duration<double>(timeout_s),
                         [this] { return finished_; }))
        return;
      std::fprintf(stderr,
                   "tierzero: error: MPI start-up did not finish within %.0f s: this rank cannot "
                   "reach the others (hint: check that every node can open TCP connections to "
                   "every other on the interfaces Open MPI uses (btl_tcp_if_include, "
                   "oob_tcp_if_include), or raise TIERZERO_COMM_TIMEOUT_S for a slow start)\n",
                   timeout_s);
      std::fflush(stderr);
      std::_Exit(1);
    });
  }
  ~StartupWatchdog() {
    if (!thread_.joinable()) return;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      finished_ = true;
    }
    done_.notify_all();
    thread_.join();
  }
  StartupWatchdog(const StartupWatchdog&) = delete;
  StartupWatchdog& operator=(const StartupWatchdog&) = delete;

 private:
  std::mutex mutex_;
  std::condition_variable done_;
  bool finished_ = false;
  std::thread thread_;
};

}  // namespace

MpiSession::MpiSession(int* argc, char*** argv, CommOptions options) {
  const StartupWatchdog watchdog(options.timeout_s);
  int initialised = 0;
  TZ_MPI_CHECK(MPI_Initialized(&initialised), "starting MPI");
  if (!initialised) {
    int provided = 0;
    TZ_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided), "starting MPI");
    initialised_here_ = true;
    TZ_CHECK(provided == MPI_THREAD_MULTIPLE,
             "MPI provides thread level " + std::to_string(provided) +
                 ", TierZero needs MPI_THREAD_MULTIPLE",
             "use an MPI built with thread support (Open MPI 4 and MPICH are, by default)");
  } else {
    int provided = 0;
    TZ_MPI_CHECK(MPI_Query_thread(&provided), "starting MPI");
    TZ_CHECK(provided == MPI_THREAD_MULTIPLE,
             "MPI was initialised with thread level " + std::to_string(provided) +
                 ", TierZero needs MPI_THREAD_MULTIPLE",
             "initialise MPI with MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...) or let "
             "tierzero::comm::MpiSession do it");
  }
  TZ_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "starting MPI");
  world_ = MpiCommunicator::world(options);
  set_error_rank(world_->rank());
  log::set_rank(world_->rank(), world_->size());
}

MpiSession::~MpiSession() {
  world_.reset();
  if (comm_failed()) {
    // An operation may still be inside MPI with a dead peer: finalising would hang.
    std::fflush(stdout);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (initialised_here_) MPI_Finalize();
}

int MpiSession::rank() const {
  return world_->rank();
}
int MpiSession::size() const {
  return world_->size();
}

void abort_job(const std::string& message, int exit_code) {
  std::fprintf(stderr, "tierzero: error: %s\n", message.c_str());
  std::fflush(stdout);
  std::fflush(stderr);
  comm_detail::mark_failed();
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (initialised) {
    // The other survivors of a dead or stalled peer reach their own deadlines a moment later;
    // MPI_Abort would kill them before they say what they saw. A short grace lets every rank
    // report (TIERZERO_COMM_ABORT_GRACE_S, default 2 s, 0 to abort at once).
    double grace_s = 2.0;
    if (const char* g = std::getenv("TIERZERO_COMM_ABORT_GRACE_S")) grace_s = std::atof(g);
    if (grace_s > 0.0 && grace_s < 600.0)
      std::this_thread::sleep_for(std::chrono::duration<double>(grace_s));
    MPI_Abort(MPI_COMM_WORLD, exit_code);
  }
  std::_Exit(exit_code);
}

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
    if (std::getenv(v) != nullptr) return true;
  return false;
}

bool mpi_cuda_aware() {
  if (const char* env = std::getenv("TIERZERO_MPI_CUDA_AWARE"); env != nullptr && *env != '\0')
    return std::strcmp(env, "0") != 0;
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  return MPIX_Query_cuda_support() == 1;
#else
  return false;
#endif
}

// --- MpiCommunicator ---

MpiCommunicator::MpiCommunicator(std::string name, int rank, std::vector<int> world_ranks,
                                 CommOptions options, std::unique_ptr<Engine> engine)
    : Communicator(std::move(name), rank, std::move(world_ranks), options),
      engine_(std::move(engine)) {}

MpiCommunicator::~MpiCommunicator() = default;

std::unique_ptr<MpiCommunicator> MpiCommunicator::world(CommOptions options) {
  int initialised = 0;
  TZ_MPI_CHECK(MPI_Initialized(&initialised), "creating the world communicator");
  TZ_CHECK(initialised, "MPI is not initialised", "create a tierzero::comm::MpiSession first");
  MPI_Comm comm = MPI_COMM_NULL;
  TZ_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "creating the world communicator");
  TZ_MPI_CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), "creating the world communicator");
  int rank = 0, size = 0;
  TZ_MPI_CHECK(MPI_Comm_rank(comm, &rank), "creating the world communicator");
  TZ_MPI_CHECK(MPI_Comm_size(comm, &size), "creating the world communicator");
  g_world_rank = rank;
  MPI_Comm node = MPI_COMM_NULL;
  int node_ranks = 0;
  TZ_MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node),
               "counting the ranks on this node");
  TZ_MPI_CHECK(MPI_Comm_size(node, &node_ranks), "counting the ranks on this node");
  (void)MPI_Comm_free(&node);
  g_oversubscribed = static_cast<unsigned>(node_ranks) > std::thread::hardware_concurrency();
  std::vector<int> ranks(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) ranks[static_cast<size_t>(r)] = r;
  return std::unique_ptr<MpiCommunicator>(new MpiCommunicator(
      "world", rank, std::move(ranks), options, std::make_unique<Engine>(comm)));
}

std::unique_ptr<MpiCommunicator> MpiCommunicator::split(int color, int key,
                                                        const std::string& name) {
  const std::string what = "creating group " + name + " from " + describe();
  MPI_Comm parent = engine_->comm;
  // Shared with the engine: if the wait below times out, the engine may still write here.
  struct Result {
    MPI_Comm child = MPI_COMM_NULL;
    int rank = 0;
    std::vector<int> members;  // (group size) world rank of each group rank
  };
  auto result = std::make_shared<Result>();
  // Runs on the engine: creating a communicator is a collective on the parent, and MPI forbids
  // two threads running collectives on one communicator at once.
  auto op = std::make_shared<MpiOp>(what, options().timeout_s, true);
  op->run = [=] {
    TZ_MPI_CHECK(MPI_Comm_split(parent, color, key, &result->child), what);
    TZ_MPI_CHECK(MPI_Comm_set_errhandler(result->child, MPI_ERRORS_RETURN), what);
    int child_size = 0;
    TZ_MPI_CHECK(MPI_Comm_rank(result->child, &result->rank), what);
    TZ_MPI_CHECK(MPI_Comm_size(result->child, &child_size), what);
    result->members.resize(static_cast<size_t>(child_size));
    int me = g_world_rank;
    TZ_MPI_CHECK(MPI_Allgather(&me, 1, MPI_INT, result->members.data(), 1, MPI_INT, result->child),
                 what);
  };
  engine_->submit(op);
  op->wait();
  return std::unique_ptr<MpiCommunicator>(
      new MpiCommunicator(name, result->rank, std::move(result->members), options(),
                          std::make_unique<Engine>(result->child)));
}

void MpiCommunicator::broadcast_bytes(void* buffer, size_t bytes, int root) {
  check_peer("broadcast_bytes", root);
  check_buffers("broadcast_bytes", buffer, buffer, bytes);
  const std::string what = "broadcast of " + std::to_string(bytes) + " bytes on " + describe();
  const int n = mpi_count(bytes, what);
  MPI_Comm comm = engine_->comm;
  auto op = std::make_shared<MpiOp>(what, options().timeout_s, true);
  op->start = [=] {
    MPI_Request request = MPI_REQUEST_NULL;
    TZ_MPI_CHECK(MPI_Ibcast(buffer, n, MPI_BYTE, root, comm, &request), what);
    return request;
  };
  engine_->execute(op);
}

namespace {

// The ranks of `e`'s communicator on this node (a collective on it, run on its engine like
// split()), asked once and kept.
std::pair<int, int> node_local(MpiCommunicator::Engine& e, const std::string& group,
                               double timeout_s) {
  std::lock_guard<std::mutex> lock(e.node_mutex);
  if (!e.node_known) {
    const std::string what = "finding the ranks of " + group + " on this node";
    MPI_Comm parent = e.comm;
    // Shared with the engine: if the wait below times out, the engine may still write here.
    auto result = std::make_shared<std::pair<int, int>>(0, 0);
    auto op = std::make_shared<MpiOp>(what, timeout_s, true);
    op->run = [=] {
      MPI_Comm node = MPI_COMM_NULL;
      // Key 0 for all: ordered by rank in the parent.
      TZ_MPI_CHECK(MPI_Comm_split_type(parent, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node),
                   what);
      TZ_MPI_CHECK(MPI_Comm_rank(node, &result->first), what);
      TZ_MPI_CHECK(MPI_Comm_size(node, &result->second), what);
      TZ_MPI_CHECK(MPI_Comm_free(&node), what);
    };
    e.submit(op);
    op->wait();
    e.node_rank = result->first;
    e.node_size = result->second;
    e.node_known = true;
  }
  return {e.node_rank, e.node_size};
}

}  // namespace

int node_local_rank(MpiCommunicator& group) {
  return node_local(*group.engine_, group.describe(), group.options().timeout_s).first;
}

int node_local_size(MpiCommunicator& group) {
  return node_local(*group.engine_, group.describe(), group.options().timeout_s).second;
}

namespace {

// The operations, built once for both forms: *_async submits them to the engine, the blocking
// form executes them (on the caller's thread when nothing else is pending).

std::shared_ptr<MpiOp> all_gather_op(MpiCommunicator::Engine* e, const std::string& what,
                                     double timeout_s, int rank, int ranks, const void* send,
                                     void* recv, size_t count, DType dtype) {
  const int n = mpi_count(count, what);
  const size_t send_bytes = count * dtype_size(dtype);
  const size_t recv_bytes = send_bytes * static_cast<size_t>(ranks);
  const bool in_place =
      send == static_cast<const char*>(recv) + send_bytes * static_cast<size_t>(rank);
  const bool cuda_aware = mpi_cuda_aware();
  const bool stage_send = !cuda_aware && comm_detail::is_device_pointer(send);
  const bool stage_recv = !cuda_aware && comm_detail::is_device_pointer(recv);
  auto op = std::make_shared<MpiOp>(what, timeout_s, true);
  auto st = std::make_shared<Staged>();
  op->start = [=] {
    const MPI_Datatype t = wire_type(dtype);
    st->recv = stage(recv, recv_bytes, stage_recv, in_place, e->recv_stage);
    MPI_Request request = MPI_REQUEST_NULL;
    if (in_place) {
      TZ_MPI_CHECK(MPI_Iallgather(MPI_IN_PLACE, 0, t, st->recv.host, n, t, e->comm, &request),
                   what);
    } else {
      st->send = stage(send, send_bytes, stage_send, true, e->send_stage);
      TZ_MPI_CHECK(MPI_Iallgather(st->send.host, n, t, st->recv.host, n, t, e->comm, &request),
                   what);
    }
    return request;
  };
  op->finish = [=] { unstage(st->recv); };
  return op;
}

std::shared_ptr<MpiOp> reduce_scatter_op(MpiCommunicator::Engine* e, const std::string& what,
                                         double timeout_s, int ranks, const void* send, void* recv,
                                         size_t count, DType dtype, ReduceOp rop) {
  const int n = mpi_count(count, what);
  const size_t total = count * static_cast<size_t>(ranks);
  const size_t esize = dtype_size(dtype);
  const bool widen = dtype != DType::f32;
  // Widening and averaging happen on the host, so device buffers are staged for them.
  const bool host_math = widen || rop == ReduceOp::avg || !mpi_cuda_aware();
  const bool stage_send = host_math && comm_detail::is_device_pointer(send);
  const bool stage_recv = host_math && comm_detail::is_device_pointer(recv);
  auto op = std::make_shared<MpiOp>(what, timeout_s, true);
  auto st = std::make_shared<Staged>();
  op->start = [=] {
    st->send = stage(send, total * esize, stage_send, true, e->send_stage);
    st->recv = stage(recv, count * esize, stage_recv, false, e->recv_stage);
    const void* s32 = st->send.host;  // (total) fp32
    st->recv32 = static_cast<float*>(st->recv.host);
    if (widen) {
      auto* wide = static_cast<float*>(e->send_wide.get(total * sizeof(float)));  // (total)
      convert_to_f32(wide, st->send.host, dtype, total);
      s32 = wide;
      st->recv32 = static_cast<float*>(e->recv_wide.get(count * sizeof(float)));  // (count)
    }
    MPI_Request request = MPI_REQUEST_NULL;
    TZ_MPI_CHECK(
        MPI_Ireduce_scatter_block(s32, st->recv32, n, MPI_FLOAT, MPI_SUM, e->comm, &request), what);
    return request;
  };
  op->finish = [=] {
    if (rop == ReduceOp::avg) scale(st->recv32, count, ranks);
    if (widen) convert_from_f32(st->recv.host, dtype, st->recv32, count);
    unstage(st->recv);
  };
  return op;
}

std::shared_ptr<MpiOp> all_reduce_op(MpiCommunicator::Engine* e, const std::string& what,
                                     double timeout_s, int ranks, const void* send, void* recv,
                                     size_t count, DType dtype, ReduceOp rop) {
  const int n = mpi_count(count, what);
  const size_t bytes = count * dtype_size(dtype);
  const bool in_place = send == recv;
  const bool widen = dtype != DType::f32;
  const bool host_math = widen || rop == ReduceOp::avg || !mpi_cuda_aware();
  const bool stage_send = host_math && !in_place && comm_detail::is_device_pointer(send);
  const bool stage_recv = host_math && comm_detail::is_device_pointer(recv);
  auto op = std::make_shared<MpiOp>(what, timeout_s, true);
  auto st = std::make_shared<Staged>();
  op->start = [=] {
    st->recv = stage(recv, bytes, stage_recv, in_place, e->recv_stage);
    st->send = in_place ? st->recv : stage(send, bytes, stage_send, true, e->send_stage);
    MPI_Request request = MPI_REQUEST_NULL;
    if (widen) {
      // Out of place: Open MPI's non-blocking in-place all-reduce is markedly slower.
      auto* s32 = static_cast<float*>(e->send_wide.get(count * sizeof(float)));   // (count)
      st->recv32 = static_cast<float*>(e->recv_wide.get(count * sizeof(float)));  // (count)
      convert_to_f32(s32, st->send.host, dtype, count);
      TZ_MPI_CHECK(MPI_Iallreduce(s32, st->recv32, n, MPI_FLOAT, MPI_SUM, e->comm, &request), what);
    } else {
      st->recv32 = static_cast<float*>(st->recv.host);
      TZ_MPI_CHECK(MPI_Iallreduce(in_place ? MPI_IN_PLACE : st->send.host, st->recv32, n, MPI_FLOAT,
                                  MPI_SUM, e->comm, &request),
                   what);
    }
    return request;
  };
  op->finish = [=] {
    if (rop == ReduceOp::avg) scale(st->recv32, count, ranks);
    if (widen) convert_from_f32(st->recv.host, dtype, st->recv32, count);
    unstage(st->recv);
  };
  return op;
}

std::shared_ptr<MpiOp> broadcast_op(MpiCommunicator::Engine* e, const std::string& what,
                                    double timeout_s, int rank, void* buffer, size_t count,
                                    DType dtype, int root) {
  const int n = mpi_count(count, what);
  const size_t bytes = count * dtype_size(dtype);
  const bool staged = !mpi_cuda_aware() && comm_detail::is_device_pointer(buffer);
  const bool is_root = root == rank;
  auto op = std::make_shared<MpiOp>(what, timeout_s, true);
  auto st = std::make_shared<Staged>();
  op->start = [=] {
    st->recv = stage(buffer, bytes, staged, is_root, e->recv_stage);
    MPI_Request request = MPI_REQUEST_NULL;
    TZ_MPI_CHECK(MPI_Ibcast(st->recv.host, n, wire_type(dtype), root, e->comm, &request), what);
    return request;
  };
  op->finish = [=] {
    if (!is_root) unstage(st->recv);
  };
  return op;
}

std::shared_ptr<MpiOp> all_to_all_op(MpiCommunicator::Engine* e, const std::string& what,
                                     double timeout_s, int ranks, const void* send, void* recv,
                                     size_t count, DType dtype) {
  TZ_CHECK(count == 0 || send != recv, what + ": send and recv are the same buffer",
           "all_to_all does not work in place; use a separate output buffer");
  const int n = mpi_count(count, what);
  const size_t bytes = count * dtype_size(dtype) * static_cast<size_t>(ranks);
  const bool cuda_aware = mpi_cuda_aware();
  const bool stage_send = !cuda_aware && comm_detail::is_device_pointer(send);
  const bool stage_recv = !cuda_aware && comm_detail::is_device_pointer(recv);
  auto op = std::make_shared<MpiOp>(what, timeout_s, true);
  auto st = std::make_shared<Staged>();
  op->start = [=] {
    const MPI_Datatype t = wire_type(dtype);
    st->send = stage(send, bytes, stage_send, true, e->send_stage);
    st->recv = stage(recv, bytes, stage_recv, false, e->recv_stage);
    MPI_Request request = MPI_REQUEST_NULL;
    TZ_MPI_CHECK(MPI_Ialltoall(st->send.host, n, t, st->recv.host, n, t, e->comm, &request), what);
    return request;
  };
  op->finish = [=] { unstage(st->recv); };
  return op;
}

std::shared_ptr<MpiOp> barrier_op(MpiCommunicator::Engine* e, const std::string& what,
                                  double timeout_s) {
  auto op = std::make_shared<MpiOp>(what, timeout_s, true);
  op->start = [=] {
    MPI_Request request = MPI_REQUEST_NULL;
    TZ_MPI_CHECK(MPI_Ibarrier(e->comm, &request), what);
    return request;
  };
  return op;
}

std::string all_gather_what(size_t count, DType dtype, const std::string& group) {
  return comm_detail::describe_op("all_gather", count, dtype, group, "per rank");
}
std::string reduce_what(const char* name, size_t count, DType dtype, const std::string& group,
                        ReduceOp op) {
  return comm_detail::describe_op(name, count, dtype, group, reduce_op_name(op));
}
std::string broadcast_what(size_t count, DType dtype, const std::string& group, int root) {
  return comm_detail::describe_op("broadcast", count, dtype, group,
                                  ("from rank " + std::to_string(root)).c_str());
}
std::string all_to_all_what(size_t count, DType dtype, const std::string& group) {
  return comm_detail::describe_op("all_to_all", count, dtype, group, "per peer");
}

}  // namespace

CommRequest MpiCommunicator::all_gather_async(const void* send, void* recv, size_t count,
                                              DType dtype, Event* ready) {
  check_buffers("all_gather", send, recv, count);
  auto op = all_gather_op(engine_.get(), all_gather_what(count, dtype, describe()),
                          options().timeout_s, rank(), size(), send, recv, count, dtype);
  op->set_ready(ready);
  engine_->submit(op);
  return CommRequest(op);
}

void MpiCommunicator::all_gather(const void* send, void* recv, size_t count, DType dtype,
                                 Event* ready) {
  check_buffers("all_gather", send, recv, count);
  auto op = all_gather_op(engine_.get(), all_gather_what(count, dtype, describe()),
                          options().timeout_s, rank(), size(), send, recv, count, dtype);
  op->set_ready(ready);
  engine_->execute(op);
}

CommRequest MpiCommunicator::reduce_scatter_async(const void* send, void* recv, size_t count,
                                                  DType dtype, ReduceOp op, Event* ready) {
  check_buffers("reduce_scatter", send, recv, count);
  auto o =
      reduce_scatter_op(engine_.get(), reduce_what("reduce_scatter", count, dtype, describe(), op),
                        options().timeout_s, size(), send, recv, count, dtype, op);
  o->set_ready(ready);
  engine_->submit(o);
  return CommRequest(o);
}

void MpiCommunicator::reduce_scatter(const void* send, void* recv, size_t count, DType dtype,
                                     ReduceOp op, Event* ready) {
  check_buffers("reduce_scatter", send, recv, count);
  auto o =
      reduce_scatter_op(engine_.get(), reduce_what("reduce_scatter", count, dtype, describe(), op),
                        options().timeout_s, size(), send, recv, count, dtype, op);
  o->set_ready(ready);
  engine_->execute(o);
}

CommRequest MpiCommunicator::all_reduce_async(const void* send, void* recv, size_t count,
                                              DType dtype, ReduceOp op, Event* ready) {
  check_buffers("all_reduce", send, recv, count);
  auto o = all_reduce_op(engine_.get(), reduce_what("all_reduce", count, dtype, describe(), op),
                         options().timeout_s, size(), send, recv, count, dtype, op);
  o->set_ready(ready);
  engine_->submit(o);
  return CommRequest(o);
}

void MpiCommunicator::all_reduce(const void* send, void* recv, size_t count, DType dtype,
                                 ReduceOp op, Event* ready) {
  check_buffers("all_reduce", send, recv, count);
  auto o = all_reduce_op(engine_.get(), reduce_what("all_reduce", count, dtype, describe(), op),
                         options().timeout_s, size(), send, recv, count, dtype, op);
  o->set_ready(ready);
  engine_->execute(o);
}

CommRequest MpiCommunicator::broadcast_async(void* buffer, size_t count, DType dtype, int root) {
  check_peer("broadcast", root);
  check_buffers("broadcast", buffer, buffer, count);
  auto op = broadcast_op(engine_.get(), broadcast_what(count, dtype, describe(), root),
                         options().timeout_s, rank(), buffer, count, dtype, root);
  engine_->submit(op);
  return CommRequest(op);
}

void MpiCommunicator::broadcast(void* buffer, size_t count, DType dtype, int root) {
  check_peer("broadcast", root);
  check_buffers("broadcast", buffer, buffer, count);
  engine_->execute(broadcast_op(engine_.get(), broadcast_what(count, dtype, describe(), root),
                                options().timeout_s, rank(), buffer, count, dtype, root));
}

CommRequest MpiCommunicator::all_to_all_async(const void* send, void* recv, size_t count,
                                              DType dtype) {
  check_buffers("all_to_all", send, recv, count);
  auto op = all_to_all_op(engine_.get(), all_to_all_what(count, dtype, describe()),
                          options().timeout_s, size(), send, recv, count, dtype);
  engine_->submit(op);
  return CommRequest(op);
}

void MpiCommunicator::all_to_all(const void* send, void* recv, size_t count, DType dtype) {
  check_buffers("all_to_all", send, recv, count);
  engine_->execute(all_to_all_op(engine_.get(), all_to_all_what(count, dtype, describe()),
                                 options().timeout_s, size(), send, recv, count, dtype));
}

CommRequest MpiCommunicator::barrier_async() {
  auto op = barrier_op(engine_.get(), "barrier on " + describe(), options().timeout_s);
  engine_->submit(op);
  return CommRequest(op);
}

void MpiCommunicator::barrier() {
  engine_->execute(barrier_op(engine_.get(), "barrier on " + describe(), options().timeout_s));
}

CommRequest MpiCommunicator::send_async(const void* buffer, size_t count, DType dtype, int peer,
                                        int tag) {
  check_peer("send", peer);
  check_buffers("send", buffer, buffer, count);
  const std::string what = comm_detail::describe_op("send", count, dtype, describe(),
                                                    ("to rank " + std::to_string(peer)).c_str());
  const int n = mpi_count(count, what);
  const size_t bytes = count * dtype_size(dtype);
  const bool staged = !mpi_cuda_aware() && comm_detail::is_device_pointer(buffer);
  Engine* e = engine_.get();
  auto op = std::make_shared<MpiOp>(what, options().timeout_s, false);
  // A staged send owns its copy: point-to-point operations overlap, so no shared scratch.
  auto copy = std::make_shared<std::vector<unsigned char>>();  // (bytes) when staged
  op->start = [=] {
    const void* host = buffer;
    if (staged) {
      copy->resize(bytes);
      comm_detail::copy_device_to_host(copy->data(), buffer, bytes);
      host = copy->data();
    }
    MPI_Request request = MPI_REQUEST_NULL;
    TZ_MPI_CHECK(MPI_Isend(host, n, wire_type(dtype), peer, tag, e->comm, &request), what);
    return request;
  };
  e->submit(op);
  return CommRequest(op);
}

CommRequest MpiCommunicator::recv_async(void* buffer, size_t count, DType dtype, int peer,
                                        int tag) {
  check_peer("recv", peer);
  check_buffers("recv", buffer, buffer, count);
  const std::string what = comm_detail::describe_op("recv", count, dtype, describe(),
                                                    ("from rank " + std::to_string(peer)).c_str());
  const int n = mpi_count(count, what);
  const size_t bytes = count * dtype_size(dtype);
  const bool staged = !mpi_cuda_aware() && comm_detail::is_device_pointer(buffer);
  Engine* e = engine_.get();
  auto op = std::make_shared<MpiOp>(what, options().timeout_s, false);
  auto copy = std::make_shared<std::vector<unsigned char>>();  // (bytes) when staged
  op->start = [=] {
    void* host = buffer;
    if (staged) {
      copy->resize(bytes);
      host = copy->data();
    }
    MPI_Request request = MPI_REQUEST_NULL;
    TZ_MPI_CHECK(MPI_Irecv(host, n, wire_type(dtype), peer, tag, e->comm, &request), what);
    return request;
  };
  if (staged) op->finish = [=] { comm_detail::copy_host_to_device(buffer, copy->data(), bytes); };
  e->submit(op);
  return CommRequest(op);
}

}  // namespace tierzero::comm
