// The NCCL backend: a Communicator over device buffers for one group, created from the group's
// MpiCommunicator (rank 0's ncclUniqueId is broadcast over MPI), running on its own CUDA stream.
// Operations issued between group_start() and group_end() become one NCCL group call, so a
// unit's tensors go out as one launch. Only in builds with CUDA; elsewhere the factory throws.
#pragma once

#include <memory>

#include "tierzero/comm/communicator.hpp"
#include "tierzero/device/device.hpp"

namespace tierzero::comm {

class MpiCommunicator;

// Whether this build has the NCCL backend and a GPU to run it; when not, `reason` says why.
bool nccl_available(std::string* reason = nullptr);

// Collective over `group`: every rank of it calls this with its own CUDA device. The NCCL
// communicator is initialised non-blocking so that a peer that never joins times out (the
// group's timeout) instead of hanging. Data handed to an operation must be ready on the device
// when it is issued: pass the producer's event as `ready` (all-gather, reduce-scatter,
// all-reduce), make the NCCL stream wait for the producer (`nccl_stream()`), or synchronise the
// producer first.
std::unique_ptr<Communicator> make_nccl_communicator(MpiCommunicator& group, Device& device);

// The stream a communicator from make_nccl_communicator() runs on, to order work against it.
Stream& nccl_stream(Communicator& nccl_communicator);

}  // namespace tierzero::comm
