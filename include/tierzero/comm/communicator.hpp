// Communicator: the collectives every parallel mode needs (ZeRO's all-gather and reduce-scatter,
// tensor/pipeline/sequence parallelism's all-reduce, send/recv and all-to-all), one interface
// over two engines (MPI for host buffers, NCCL for device buffers). Every operation exists in an
// asynchronous form returning a CommRequest and a blocking form built on it; both fail with a
// tierzero::Error naming the operation, the group and its ranks when a peer dies or stalls,
// instead of hanging. The collectives ZeRO overlaps with compute (all-gather, reduce-scatter,
// all-reduce) can also start after an Event, so that a producer's copy or kernel orders them
// without the caller blocking on the host.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tierzero/core/dtype.hpp"

namespace tierzero {
class Event;   // tierzero/device/device.hpp
class Stream;  // tierzero/device/device.hpp
}  // namespace tierzero

namespace tierzero::comm {

enum class ReduceOp : uint8_t { sum, avg };
const char* reduce_op_name(ReduceOp op);

// Knobs shared by every communicator of a job.
struct CommOptions {
  // Seconds an operation may take, counted from when it is issued, before every rank waiting on
  // it fails with an Error. Large, because a healthy collective behind a slow step must not be
  // mistaken for a dead peer; tests use a few seconds.
  double timeout_s = 300.0;

  // The defaults, with TIERZERO_COMM_TIMEOUT_S (seconds) from the environment when set.
  static CommOptions from_env();
};

// Sharding helpers for sizes that do not divide by the rank count. The collectives take equal
// per-rank counts (as MPI and NCCL do), so the caller pads: a tensor of `total` elements is cut
// into `shard_count(total, ranks)`-element shards and the buffer is `padded_count` long, the
// tail of the last shard(s) zero. `owned_count` is how many real elements a rank's shard holds.
size_t shard_count(size_t total, int ranks);
size_t padded_count(size_t total, int ranks);
size_t owned_count(size_t total, int ranks, int rank);

// True once any communicator in this process has timed out or failed: its buffers may still be
// in use by the engine and the job cannot continue. Waits fail fast from then on, so that one
// dead peer costs one timeout, not one per pending operation.
bool comm_failed();

namespace comm_detail {
// What a backend hands to CommRequest: one issued operation.
class PendingOp {
 public:
  virtual ~PendingOp() = default;
  virtual bool test() = 0;  // true when complete; throws Error when failed or past its deadline
  virtual void wait() = 0;  // returns when complete; throws Error when failed or timed out
  // monotonic_seconds() when the backend saw the operation complete; -1: it does not say (then
  // CommRequest takes the time its wait or test saw it).
  virtual double completed_s() const { return -1.0; }
};
}  // namespace comm_detail

// Handle to an asynchronous operation. Its buffers must stay alive and untouched until wait()
// returns or test() returns true. Destroying a pending request waits for it (an error is logged,
// never thrown from the destructor).
class CommRequest {
 public:
  CommRequest() = default;
  explicit CommRequest(std::shared_ptr<comm_detail::PendingOp> op) : op_(std::move(op)) {}
  CommRequest(CommRequest&&) noexcept = default;
  CommRequest& operator=(CommRequest&& other) noexcept;
  CommRequest(const CommRequest&) = delete;
  CommRequest& operator=(const CommRequest&) = delete;
  ~CommRequest();

  void wait();
  bool test();
  bool pending() const { return op_ != nullptr; }
  // After wait() or a true test(): monotonic_seconds() when the operation completed (the
  // backend's own stamp where it keeps one, else when wait or test saw it); -1 before.
  double completed_s() const { return completed_s_; }

 private:
  void finish_quietly() noexcept;
  void note_completion(const comm_detail::PendingOp& op);
  std::shared_ptr<comm_detail::PendingOp> op_;
  double completed_s_ = -1.0;
};

// Waits for every request, in order; the first failure is rethrown after the others are waited.
void wait_all(std::vector<CommRequest>& requests);

// A group of ranks and the collectives among them. Counts are elements of `dtype`; ranks and
// roots are ranks within this group (0..size()-1). Equal per-rank counts throughout.
class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  virtual const char* backend() const = 0;  // "mpi" or "nccl"
  const std::string& name() const { return name_; }
  int rank() const { return rank_; }
  int size() const { return static_cast<int>(world_ranks_.size()); }
  const std::vector<int>& world_ranks() const { return world_ranks_; }  // by group rank
  const CommOptions& options() const { return options_; }
  std::string describe() const;  // "group dp (ranks 0-3)"

  // `ready` (all-gather, reduce-scatter, all-reduce): when given, the operation starts only once
  // that event has completed (e.g. recorded after the copy that fills `send`), without the
  // caller blocking. MPI: the engine waits for it before posting the MPI call, under the
  // operation's deadline (an event that never completes is a timed-out Error naming the
  // operation), and later operations of the communicator still start after it, in issue order.
  // NCCL: the communicator's stream waits for it (a CUDA event). The event must stay alive, and
  // must not be recorded again, until the operation has completed. A blocking form with a
  // `ready` event waits for it first.

  // recv (count * size()) = the ranks' send (count) blocks in rank order. send may be
  // recv + rank() * count (in place).
  virtual CommRequest all_gather_async(const void* send, void* recv, size_t count, DType dtype,
                                       Event* ready = nullptr) = 0;
  // recv (count) = block rank() of the sum (or mean) over ranks of send (count * size()).
  // bf16/fp16 are accumulated in fp32 and rounded once. send and recv must not overlap.
  virtual CommRequest reduce_scatter_async(const void* send, void* recv, size_t count, DType dtype,
                                           ReduceOp op, Event* ready = nullptr) = 0;
  // recv (count) = sum (or mean) over ranks of send (count); send == recv is allowed.
  virtual CommRequest all_reduce_async(const void* send, void* recv, size_t count, DType dtype,
                                       ReduceOp op, Event* ready = nullptr) = 0;
  // buffer (count) of rank `root` is copied to every rank's buffer.
  virtual CommRequest broadcast_async(void* buffer, size_t count, DType dtype, int root) = 0;
  // Point to point; a send matches the recv of the same tag from this rank on `peer`.
  virtual CommRequest send_async(const void* buffer, size_t count, DType dtype, int peer,
                                 int tag = 0) = 0;
  virtual CommRequest recv_async(void* buffer, size_t count, DType dtype, int peer,
                                 int tag = 0) = 0;
  // recv block j (count) = send block rank() of rank j; send and recv are (count * size()).
  virtual CommRequest all_to_all_async(const void* send, void* recv, size_t count, DType dtype) = 0;
  virtual CommRequest barrier_async() = 0;

  // The device stream the operations run on (NCCL), so that a profile can time them there with
  // events recorded around them (outside a group, an operation is on the stream once its call
  // returns); null where they run on the host (MPI's engine thread).
  virtual Stream* device_stream() { return nullptr; }

  // Batches: operations issued between group_start() and group_end() may be fused into one
  // launch (NCCL group calls, e.g. all of a unit's tensors). MPI issues them one by one.
  virtual void group_start() {}
  virtual void group_end() {}

  // Blocking forms: issue, then wait under the timeout. A backend may run them more directly
  // (the MPI backend runs them on the calling thread when nothing else is pending).
  virtual void all_gather(const void* send, void* recv, size_t count, DType dtype,
                          Event* ready = nullptr) {
    all_gather_async(send, recv, count, dtype, ready).wait();
  }
  virtual void reduce_scatter(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                              Event* ready = nullptr) {
    reduce_scatter_async(send, recv, count, dtype, op, ready).wait();
  }
  virtual void all_reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                          Event* ready = nullptr) {
    all_reduce_async(send, recv, count, dtype, op, ready).wait();
  }
  virtual void broadcast(void* buffer, size_t count, DType dtype, int root) {
    broadcast_async(buffer, count, dtype, root).wait();
  }
  virtual void send(const void* buffer, size_t count, DType dtype, int peer, int tag = 0) {
    send_async(buffer, count, dtype, peer, tag).wait();
  }
  virtual void recv(void* buffer, size_t count, DType dtype, int peer, int tag = 0) {
    recv_async(buffer, count, dtype, peer, tag).wait();
  }
  virtual void all_to_all(const void* send, void* recv, size_t count, DType dtype) {
    all_to_all_async(send, recv, count, dtype).wait();
  }
  virtual void barrier() { barrier_async().wait(); }

 protected:
  Communicator(std::string name, int rank, std::vector<int> world_ranks, CommOptions options);

  // Throws Error naming the operation and group when arguments are bad (peer out of range,
  // null buffers with a non-zero count).
  void check_peer(const char* op, int peer) const;
  void check_buffers(const char* op, const void* a, const void* b, size_t count) const;

 private:
  std::string name_;
  int rank_ = 0;
  std::vector<int> world_ranks_;
  CommOptions options_;
};

// "0-3" for contiguous ranks, "0,2,4,6" otherwise.
std::string format_ranks(const std::vector<int>& ranks);

}  // namespace tierzero::comm
