// The NCCL backend's entry points for builds without CUDA: a clear Error instead of a link
// failure, and a reason that tests print when they skip.
#include "tierzero/comm/nccl_communicator.hpp"
#include "tierzero/core/error.hpp"

namespace tierzero::comm {

bool nccl_available(std::string* reason) {
  if (reason != nullptr) *reason = "TierZero was built without CUDA, so without NCCL";
  return false;
}

std::unique_ptr<Communicator> make_nccl_communicator(MpiCommunicator&, Device&) {
  TZ_THROW("the NCCL backend is not in this build (no CUDA)",
           "reconfigure with -DTIERZERO_CUDA=ON on a machine with the CUDA toolkit, or use the "
           "MPI backend");
}

Stream& nccl_stream(Communicator&) {
  TZ_THROW("the NCCL backend is not in this build (no CUDA)",
           "reconfigure with -DTIERZERO_CUDA=ON on a machine with the CUDA toolkit");
}

}  // namespace tierzero::comm
