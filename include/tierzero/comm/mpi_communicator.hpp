// The MPI backend: MpiSession (MPI's lifetime in a process) and MpiCommunicator, a group of
// ranks whose asynchronous operations run on a per-communicator engine thread. The engine is why
// they progress while the caller computes (Open MPI has no progress thread of its own). Every
// operation is a non-blocking MPI call polled against a deadline, on the engine or, for a
// blocking call with nothing else pending, on the caller's thread; so the caller never blocks
// inside MPI, and a dead or stalled peer becomes a timed-out Error instead of a hang.
// Host buffers go to MPI directly; device buffers are staged through host memory when the MPI
// build is not CUDA-aware (or when bf16/fp16 must be widened for the reduction anyway).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tierzero/comm/communicator.hpp"

namespace tierzero::comm {

class MpiCommunicator;

// Initialises MPI with MPI_THREAD_MULTIPLE (the engine threads call MPI concurrently) unless the
// program already did, and finalises it on destruction if it initialised it. Also sets the rank
// that errors and log lines name. One per process, created first in main() of an MPI program.
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv, CommOptions options = CommOptions::from_env());
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  int rank() const;
  int size() const;
  MpiCommunicator& world() { return *world_; }

 private:
  bool initialised_here_ = false;
  std::unique_ptr<MpiCommunicator> world_;
};

// Prints "tierzero: error: <message>" on stderr and ends the whole MPI job with `exit_code`
// (MPI_Abort), so the launcher tears down every rank, including stalled ones. Use it after a
// comm Error: the failed operation may still hold the buffers and MPI cannot be finalised.
[[noreturn]] void abort_job(const std::string& message, int exit_code = 1);

// True when running under a launcher (mpiexec/mpirun/srun) rather than as a singleton.
bool launched_by_mpi();

// Whether MPI was built CUDA-aware (Open MPI's MPIX_Query_cuda_support); TIERZERO_MPI_CUDA_AWARE
// =0/1 overrides the detection.
bool mpi_cuda_aware();

class MpiCommunicator final : public Communicator {
 public:
  // A duplicate of MPI_COMM_WORLD named "world", so TierZero's traffic never mixes with the
  // program's own. Needs MPI initialised (MpiSession).
  static std::unique_ptr<MpiCommunicator> world(CommOptions options = CommOptions::from_env());
  ~MpiCommunicator() override;

  // Collective over this communicator: ranks passing the same `color` form a new group, ordered
  // by `key` (ties by rank here). Every rank gets its own group back.
  std::unique_ptr<MpiCommunicator> split(int color, int key, const std::string& name);

  // Raw bytes from `root` to everyone (e.g. an NCCL unique id); blocking, under the timeout.
  void broadcast_bytes(void* buffer, size_t bytes, int root);

  const char* backend() const override { return "mpi"; }
  CommRequest all_gather_async(const void* send, void* recv, size_t count, DType dtype,
                               Event* ready = nullptr) override;
  CommRequest reduce_scatter_async(const void* send, void* recv, size_t count, DType dtype,
                                   ReduceOp op, Event* ready = nullptr) override;
  CommRequest all_reduce_async(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                               Event* ready = nullptr) override;
  CommRequest broadcast_async(void* buffer, size_t count, DType dtype, int root) override;
  CommRequest send_async(const void* buffer, size_t count, DType dtype, int peer,
                         int tag = 0) override;
  CommRequest recv_async(void* buffer, size_t count, DType dtype, int peer, int tag = 0) override;
  CommRequest all_to_all_async(const void* send, void* recv, size_t count, DType dtype) override;
  CommRequest barrier_async() override;

  void all_gather(const void* send, void* recv, size_t count, DType dtype,
                  Event* ready = nullptr) override;
  void reduce_scatter(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                      Event* ready = nullptr) override;
  void all_reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                  Event* ready = nullptr) override;
  void broadcast(void* buffer, size_t count, DType dtype, int root) override;
  void all_to_all(const void* send, void* recv, size_t count, DType dtype) override;
  void barrier() override;

  struct Engine;  // the engine thread and its queue (mpi_communicator.cpp)

 private:
  friend int node_local_rank(MpiCommunicator& group);
  friend int node_local_size(MpiCommunicator& group);
  MpiCommunicator(std::string name, int rank, std::vector<int> world_ranks, CommOptions options,
                  std::unique_ptr<Engine> engine);
  std::unique_ptr<Engine> engine_;
};

// This rank's index among the ranks of `group` that share its node (MPI_Comm_split_type with
// MPI_COMM_TYPE_SHARED, ordered by group rank), and how many there are; so that each rank can
// drive the GPU of its local rank (`cuda:<local_rank % device_count>`). Collective over `group`
// the first time either is asked on a communicator (every rank must ask, in the same order
// relative to its other collectives), blocking under the timeout like split(); the answer is
// kept, so later calls are local.
int node_local_rank(MpiCommunicator& group);
int node_local_size(MpiCommunicator& group);

}  // namespace tierzero::comm

namespace tierzero::comm {

// Replaces this process with `mpiexec -n <ranks> <this program> <args...>` (adding
// --oversubscribe when there are more ranks than cores, and --allow-run-as-root as root), so a
// command such as `tierzero bench comm --ranks 2` works without typing mpiexec. Throws Error if
// mpiexec cannot be started.
[[noreturn]] void exec_under_mpiexec(int ranks, const std::vector<std::string>& args);

}  // namespace tierzero::comm
