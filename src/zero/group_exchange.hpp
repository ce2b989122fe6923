// Tiny exchanges of control values across a store's groups: every rank's pair of floats (trace
// checks), and an exact, rank-ordered sum of one double per rank (the gradient norm). They go
// through the group like any collective, on a small device buffer, so they work on every backend
// (NCCL takes device buffers only). Internal to the zero layer.
#pragma once

#include <vector>

#include "tierzero/comm/communicator.hpp"
#include "tierzero/device/device_allocator.hpp"

namespace tierzero::zero {

// Every rank's (a, b), in rank order: (ranks, 2). Collective over `group`.
std::vector<float> all_gather_pair(comm::Communicator& group, DeviceAllocator& allocator, float a,
                                   float b, const char* label);

// The sum over `group` of each rank's `local`, the same on every rank: each double travels as an
// exact (hi, lo) pair of floats (no arithmetic on the wire) and the pairs are summed in rank order,
// so every rank computes the same near-double-precise total. Collective over `group`.
double exact_group_sum(comm::Communicator& group, DeviceAllocator& allocator, double local,
                       const char* label);

}  // namespace tierzero::zero
