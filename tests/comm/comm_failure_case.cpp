// A rank that dies or stalls in the middle of a collective, for run_failure_case.sh. Every rank
// all-gathers in a loop; rank 1 either kills itself with SIGKILL while its all-gather is in
// flight ("kill") or stops taking part ("stall"). The other ranks must not hang: they fail with
// the comm layer's timeout Error (or are ended by mpiexec, which sees a rank killed by a
// signal), print one clear line and exit non-zero.
// "ready": every rank issues an all-gather that starts after an event which never completes (a
// CPU worker stream held back by a host task nobody releases); each must end in the timeout
// Error naming the operation, not hang.
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <future>
#include <string>
#include <vector>

#include "tierzero/comm/mpi_communicator.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/timer.hpp"
#include "tierzero/device/device.hpp"

int main(int argc, char** argv) {
  using namespace tierzero;
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "kill" && mode != "stall" && mode != "ready") {
    std::fprintf(stderr, "usage: %s kill|stall|ready   (under mpiexec, 2+ ranks)\n", argv[0]);
    return 2;
  }
  comm::MpiSession mpi(&argc, &argv);
  comm::MpiCommunicator& world = mpi.world();
  const size_t count = size_t{1} << 18;                                // 1 MiB of fp32 per rank
  std::vector<float> send(count, static_cast<float>(world.rank()));    // (count)
  std::vector<float> recv(count * static_cast<size_t>(world.size()));  // (ranks * count)
  Timer timer;
  if (mode == "ready") {
    auto device = make_cpu_device();
    auto stream = device->create_stream();
    auto never = device->create_event();
    std::promise<void> release;  // never fulfilled before the timeout
    std::shared_future<void> released = release.get_future().share();
    device->host_task(*stream, [released] { released.wait_for(std::chrono::minutes(5)); });
    never->record(*stream);
    try {
      world.all_gather(send.data(), recv.data(), count, DType::f32);  // all healthy so far
      timer.reset();
      comm::CommRequest r =
          world.all_gather_async(send.data(), recv.data(), count, DType::f32, never.get());
      r.wait();
    } catch (const Error& e) {
      comm::abort_job(std::string(e.what()) + " [detected after " +
                      std::to_string(timer.seconds()) + " s]");
    }
    std::fprintf(stderr, "rank %d: the ready event that never completed was not detected\n",
                 world.rank());
    return 0;
  }
  try {
    world.all_gather(send.data(), recv.data(), count, DType::f32);  // all healthy so far
    if (world.rank() == 1) {
      if (mode == "kill") {
        comm::CommRequest in_flight =
            world.all_gather_async(send.data(), recv.data(), count, DType::f32);
        std::raise(SIGKILL);
      }
      for (;;) pause();  // stalled: alive, but never joins another collective
    }
    timer.reset();
    for (int i = 0; i < 1000; ++i) world.all_gather(send.data(), recv.data(), count, DType::f32);
  } catch (const Error& e) {
    comm::abort_job(std::string(e.what()) + " [detected after " + std::to_string(timer.seconds()) +
                    " s]");
  }
  std::fprintf(stderr, "rank %d: the failure of rank 1 was not detected\n", world.rank());
  return 0;
}
