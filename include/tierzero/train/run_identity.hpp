// A run's identity in its profiles: an id drawn on rank 0 and broadcast, so every rank's profile
// carries the same one and `tierzero report` can tell profiles of different runs apart, and the
// host each rank ran on (ranks on one host share its clock, so their timelines line up).
#pragma once

#include <string>

#include "tierzero/comm/communicator.hpp"

namespace tierzero::train {

// 16 hex digits, the same on every rank of `group` (every rank must call it: it broadcasts);
// `group` null: a one-rank run, drawn locally.
std::string shared_run_id(comm::Communicator* group);
std::string host_name();  // gethostname(); "" when it fails

}  // namespace tierzero::train
