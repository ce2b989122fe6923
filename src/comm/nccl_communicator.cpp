// The NCCL backend (CUDA builds only). One NCCL communicator per group, created from the group's
// MPI communicator (rank 0's ncclUniqueId is broadcast over MPI) and initialised non-blocking, so
// that initialisation and every later operation can be abandoned (ncclCommAbort) when a peer
// dies or stalls, instead of hanging. Operations run on the communicator's own stream; a request
// is an event recorded after the operation. Inside group_start()/group_end() the operations
// become one NCCL group call and their events are recorded at group_end(). An operation with a
// ready event makes the stream wait for it first, so the producer orders it on the device.
#include "tierzero/comm/nccl_communicator.hpp"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>
#include <vector>

#include "comm_internal.hpp"
#include "tierzero/comm/mpi_communicator.hpp"
#include "tierzero/core/cuda_check.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/log.hpp"
#include "tierzero/core/memory_tracker.hpp"

namespace tierzero::comm {

namespace {

using Clock = std::chrono::steady_clock;

std::string nccl_failure(const char* expr, ncclResult_t status, ncclComm_t comm) {
  std::string s = std::string("NCCL call `") + expr + "` failed: " + ncclGetErrorString(status);
  if (comm != nullptr) {
    const char* last = ncclGetLastError(comm);
    if (last != nullptr && *last != '\0') s += " (" + std::string(last) + ")";
  }
  return s;
}

const char* nccl_hint(ncclResult_t status, const std::string& failure) {
  // NCCL refuses two ranks of a communicator on one GPU; say what to change, not "a bug".
  if (failure.find("Duplicate GPU") != std::string::npos)
    return "two ranks of this group run on the same GPU, and NCCL needs one GPU per rank: launch "
           "at most as many ranks per node as it has GPUs (mpiexec -n G, or --map-by ppr:G:node "
           "across nodes), or train with --device cpu";
  switch (status) {
    case ncclSystemError:
    case ncclRemoteError:
      return "a peer rank died or the network failed; check the other ranks' output, and rerun "
             "with NCCL_DEBUG=WARN for NCCL's own account";
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return "bad buffers, counts or a mismatched call order across ranks (a TierZero bug: "
             "report it with NCCL_DEBUG=INFO output)";
    case ncclUnhandledCudaError:
      return "a CUDA error inside NCCL; rerun with CUDA_LAUNCH_BLOCKING=1";
    default:
      return "rerun with NCCL_DEBUG=INFO for NCCL's own account";
  }
}

}  // namespace

// `context`: what was being done; `nccl_comm`: the NCCL communicator, or nullptr before it exists.
#define TZ_NCCL_CHECK(expr, context, nccl_comm)                                               \
  do {                                                                                        \
    const ncclResult_t tz_nccl_status_ = (expr);                                              \
    if (tz_nccl_status_ != ncclSuccess && tz_nccl_status_ != ncclInProgress) {                \
      ::tierzero::comm::comm_detail::mark_failed();                                           \
      const std::string tz_nccl_failure_ = nccl_failure(#expr, tz_nccl_status_, (nccl_comm)); \
      TZ_THROW(std::string(context) + ": " + tz_nccl_failure_,                                \
               nccl_hint(tz_nccl_status_, tz_nccl_failure_));                                 \
    }                                                                                         \
  } while (0)

namespace {

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::f32:
      return ncclFloat32;
    case DType::bf16:
      return ncclBfloat16;
    case DType::f16:
      return ncclFloat16;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  return op == ReduceOp::sum ? ncclSum : ncclAvg;
}

Clock::time_point deadline_after(double seconds) {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// The NCCL communicator, shared by the communicator object and its requests, so that whichever
// notices a failure first aborts it exactly once and nobody uses it afterwards.
struct NcclHandle {
  ncclComm_t comm = nullptr;
  std::atomic<bool> aborted{false};
  void abort() {
    if (!aborted.exchange(true) && comm != nullptr) (void)ncclCommAbort(comm);
  }
};

// Waits until a non-blocking communicator has no call in progress; throws on an asynchronous
// error or when the deadline passes (after aborting the communicator, which frees the peers).
void settle(NcclHandle& h, const std::string& what, double timeout_s) {
  const Clock::time_point deadline = deadline_after(timeout_s);
  for (;;) {
    if (h.aborted) comm_detail::throw_after_failure(what);
    ncclResult_t state = ncclSuccess;
    TZ_NCCL_CHECK(ncclCommGetAsyncError(h.comm, &state), what, h.comm);
    if (state == ncclSuccess) return;
    TZ_NCCL_CHECK(state, what, h.comm);
    if (Clock::now() >= deadline) {
      h.abort();
      comm_detail::throw_timeout(what, timeout_s);
    }
    std::this_thread::yield();
  }
}

class NcclOp final : public comm_detail::PendingOp {
 public:
  NcclOp(std::string what, std::shared_ptr<NcclHandle> handle, std::unique_ptr<Event> event,
         double timeout_s)
      : what_(std::move(what)),
        handle_(std::move(handle)),
        event_(std::move(event)),
        timeout_s_(timeout_s),
        deadline_(deadline_after(timeout_s)) {}

  void record(Stream& stream) {
    event_->record(stream);
    recorded_ = true;
  }

  bool test() override {
    if (recorded_ && event_->query()) return true;
    if (handle_->aborted || comm_failed()) comm_detail::throw_after_failure(what_);
    ncclResult_t state = ncclSuccess;
    TZ_NCCL_CHECK(ncclCommGetAsyncError(handle_->comm, &state), what_, handle_->comm);
    if (state != ncclInProgress) TZ_NCCL_CHECK(state, what_, handle_->comm);
    if (Clock::now() >= deadline_) {
      handle_->abort();
      comm_detail::throw_timeout(what_, timeout_s_);
    }
    return false;
  }

  void wait() override {
    TZ_CHECK(recorded_, what_ + ": waited on inside an open group",
             "call group_end() before waiting on operations issued in the group");
    int polls = 0;
    while (!test()) {
      if (++polls < 1000) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
  }

 private:
  std::string what_;
  std::shared_ptr<NcclHandle> handle_;
  std::unique_ptr<Event> event_;
  double timeout_s_;
  Clock::time_point deadline_;
  bool recorded_ = false;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(MpiCommunicator& group, Device& device)
      : Communicator(group.name(), group.rank(), group.world_ranks(), group.options()),
        device_(device) {
    TZ_CHECK(device.kind() == DeviceKind::cuda,
             "the NCCL backend for " + describe() + " needs a CUDA device, got " + device.name(),
             "pass a device from make_cuda_device(), or use the MPI backend for host buffers");
    const std::string what = "creating the NCCL communicator for " + describe();
    ncclUniqueId id{};
    if (group.rank() == 0) TZ_NCCL_CHECK(ncclGetUniqueId(&id), what, nullptr);
    group.broadcast_bytes(&id, sizeof id, 0);
    CudaDeviceGuard guard(device_.index());
    stream_ = device_.create_stream();
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // so that a peer that never joins times out instead of hanging
    TZ_NCCL_CHECK(ncclCommInitRankConfig(&handle_->comm, size(), id, rank(), &config), what,
                  nullptr);
    settle(*handle_, what, options().timeout_s);
    barrier_buffer_ = device_.raw_alloc(kBarrierBytes);
    MemoryTracker::global().on_alloc(Tier::device, Category::comm, kBarrierBytes, "nccl barrier");
  }

  ~NcclCommunicator() override {
    if (barrier_buffer_ != nullptr) {
      MemoryTracker::global().on_free(Tier::device, Category::comm, kBarrierBytes, "nccl barrier");
      device_.raw_free(barrier_buffer_);
    }
    if (handle_->comm == nullptr || handle_->aborted) return;
    if (comm_failed()) {
      handle_->abort();
      return;
    }
    try {
      const std::string what = "destroying the NCCL communicator for " + describe();
      TZ_NCCL_CHECK(ncclCommFinalize(handle_->comm), what, handle_->comm);
      settle(*handle_, what, options().timeout_s);
      TZ_NCCL_CHECK(ncclCommDestroy(handle_->comm), what, handle_->comm);
    } catch (const Error& e) {
      log::error(e.what());
      handle_->abort();
    }
  }

  const char* backend() const override { return "nccl"; }
  Stream* device_stream() override { return stream_.get(); }

  void group_start() override {
    TZ_NCCL_CHECK(ncclGroupStart(), "opening a group on " + describe(), handle_->comm);
    ++group_depth_;
  }

  void group_end() override {
    TZ_CHECK(group_depth_ > 0, "group_end() on " + describe() + " without group_start()",
             "pair every group_start() with one group_end()");
    --group_depth_;
    const std::string what = "group of operations on " + describe();
    CudaDeviceGuard guard(device_.index());
    TZ_NCCL_CHECK(ncclGroupEnd(), what, handle_->comm);
    if (group_depth_ > 0) return;
    settle(*handle_, what, options().timeout_s);
    for (auto& op : grouped_) op->record(*stream_);
    grouped_.clear();
  }

  CommRequest all_gather_async(const void* send, void* recv, size_t count, DType dtype,
                               Event* ready) override {
    check_buffers("all_gather", send, recv, count);
    return issue(
        comm_detail::describe_op("all_gather", count, dtype, describe(), "per rank"),
        [&](cudaStream_t s) {
          return ncclAllGather(send, recv, count, nccl_type(dtype), handle_->comm, s);
        },
        ready);
  }

  CommRequest reduce_scatter_async(const void* send, void* recv, size_t count, DType dtype,
                                   ReduceOp op, Event* ready) override {
    check_buffers("reduce_scatter", send, recv, count);
    return issue(
        comm_detail::describe_op("reduce_scatter", count, dtype, describe(), reduce_op_name(op)),
        [&](cudaStream_t s) {
          return ncclReduceScatter(send, recv, count, nccl_type(dtype), nccl_op(op), handle_->comm,
                                   s);
        },
        ready);
  }

  CommRequest all_reduce_async(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                               Event* ready) override {
    check_buffers("all_reduce", send, recv, count);
    return issue(
        comm_detail::describe_op("all_reduce", count, dtype, describe(), reduce_op_name(op)),
        [&](cudaStream_t s) {
          return ncclAllReduce(send, recv, count, nccl_type(dtype), nccl_op(op), handle_->comm, s);
        },
        ready);
  }

  CommRequest broadcast_async(void* buffer, size_t count, DType dtype, int root) override {
    check_peer("broadcast", root);
    check_buffers("broadcast", buffer, buffer, count);
    return issue(comm_detail::describe_op("broadcast", count, dtype, describe(),
                                          ("from rank " + std::to_string(root)).c_str()),
                 [&](cudaStream_t s) {
                   return ncclBroadcast(buffer, buffer, count, nccl_type(dtype), root,
                                        handle_->comm, s);
                 });
  }

  // NCCL matches sends and receives between two ranks in issue order; `tag` is not used.
  CommRequest send_async(const void* buffer, size_t count, DType dtype, int peer,
                         int /*tag*/) override {
    check_peer("send", peer);
    check_buffers("send", buffer, buffer, count);
    return issue(comm_detail::describe_op("send", count, dtype, describe(),
                                          ("to rank " + std::to_string(peer)).c_str()),
                 [&](cudaStream_t s) {
                   return ncclSend(buffer, count, nccl_type(dtype), peer, handle_->comm, s);
                 });
  }

  CommRequest recv_async(void* buffer, size_t count, DType dtype, int peer, int /*tag*/) override {
    check_peer("recv", peer);
    check_buffers("recv", buffer, buffer, count);
    return issue(comm_detail::describe_op("recv", count, dtype, describe(),
                                          ("from rank " + std::to_string(peer)).c_str()),
                 [&](cudaStream_t s) {
                   return ncclRecv(buffer, count, nccl_type(dtype), peer, handle_->comm, s);
                 });
  }

  CommRequest all_to_all_async(const void* send, void* recv, size_t count, DType dtype) override {
    check_buffers("all_to_all", send, recv, count);
    const std::string what =
        comm_detail::describe_op("all_to_all", count, dtype, describe(), "per peer");
    TZ_CHECK(count == 0 || send != recv, what + ": send and recv are the same buffer",
             "all_to_all does not work in place; use a separate output buffer");
    const size_t block = count * dtype_size(dtype);
    return issue(what, [&](cudaStream_t s) {
      // One send and one receive per peer, fused into one launch by the group.
      ncclResult_t status = ncclGroupStart();
      for (int peer = 0; peer < size() && status == ncclSuccess; ++peer) {
        const size_t offset = block * static_cast<size_t>(peer);
        status = ncclSend(static_cast<const char*>(send) + offset, count, nccl_type(dtype), peer,
                          handle_->comm, s);
        if (status == ncclSuccess)
          status = ncclRecv(static_cast<char*>(recv) + offset, count, nccl_type(dtype), peer,
                            handle_->comm, s);
      }
      const ncclResult_t end = ncclGroupEnd();
      return status != ncclSuccess ? status : end;
    });
  }

  CommRequest barrier_async() override {
    // NCCL has no barrier: a one-element all-reduce orders every rank the same way.
    return issue("barrier on " + describe(), [&](cudaStream_t s) {
      return ncclAllReduce(barrier_buffer_, barrier_buffer_, 1, ncclFloat32, ncclSum, handle_->comm,
                           s);
    });
  }

 private:
  static constexpr size_t kBarrierBytes = 256;  // one float used, a full allocation granule

  CommRequest issue(const std::string& what,
                    const std::function<ncclResult_t(cudaStream_t)>& launch,
                    Event* ready = nullptr) {
    if (comm_failed()) comm_detail::throw_after_failure(what);
    CudaDeviceGuard guard(device_.index());
    // On the device, without the host waiting: the launch below queues behind the wait. An event
    // of another backend cannot order this stream, and says so (Event::make_wait).
    if (ready != nullptr) ready->make_wait(*stream_);
    auto stream = static_cast<cudaStream_t>(stream_->native());
    TZ_NCCL_CHECK(launch(stream), what, handle_->comm);
    auto op = std::make_shared<NcclOp>(what, handle_, device_.create_event(), options().timeout_s);
    if (group_depth_ > 0) {
      grouped_.push_back(op);
    } else {
      settle(*handle_, what, options().timeout_s);
      op->record(*stream_);
    }
    return CommRequest(op);
  }

  Device& device_;
  std::unique_ptr<Stream> stream_;
  std::shared_ptr<NcclHandle> handle_ = std::make_shared<NcclHandle>();
  void* barrier_buffer_ = nullptr;  // (kBarrierBytes) device bytes
  int group_depth_ = 0;
  std::vector<std::shared_ptr<NcclOp>> grouped_;  // issued in the open group, not yet recorded
};

}  // namespace

bool nccl_available(std::string* reason) {
  return cuda_device_count(reason) > 0;
}

std::unique_ptr<Communicator> make_nccl_communicator(MpiCommunicator& group, Device& device) {
  return std::make_unique<NcclCommunicator>(group, device);
}

Stream& nccl_stream(Communicator& nccl_communicator) {
  Stream* stream = nccl_communicator.device_stream();
  TZ_CHECK(stream != nullptr,
           nccl_communicator.describe() + " uses the " + nccl_communicator.backend() +
               " backend, not NCCL",
           "nccl_stream() takes a communicator from make_nccl_communicator()");
  return *stream;
}

}  // namespace tierzero::comm
