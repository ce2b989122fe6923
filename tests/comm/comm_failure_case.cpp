// A rank that dies or stalls in the middle of a collective, for run_failure_case.sh. Every rank
// all-gathers in a loop; rank 1 either kills itself with SIGKILL while its all-gather is in
// flight ("kill") or stops taking part ("stall"). The other ranks must not hang: they fail with
// the comm layer's timeout Error (or are ended by mpiexec, which sees a rank killed by a
// signal), print one clear line and exit non-zero.
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <string>
#include <vector>

#include "tierzero/comm/mpi_communicator.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/timer.hpp"

int main(int argc, char** argv) {
  using namespace tierzero;
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "kill" && mode != "stall") {
    std::fprintf(stderr, "usage: %s kill|stall   (under mpiexec, 2+ ranks)\n", argv[0]);
    return 2;
  }
  comm::MpiSession mpi(&argc, &argv);
  comm::MpiCommunicator& world = mpi.world();
  const size_t count = size_t{1} << 18;                                // 1 MiB of fp32 per rank
  std::vector<float> send(count, static_cast<float>(world.rank()));    // (count)
  std::vector<float> recv(count * static_cast<size_t>(world.size()));  // (ranks * count)
  Timer timer;
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
