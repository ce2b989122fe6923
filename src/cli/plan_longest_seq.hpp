// `tierzero plan --longest-seq`: the longest sequence a model trains at with given budgets, by
// binary search over T with the estimator (the planner's fit test at each T), overall (every
// recompute mode and checkpoint tier searched) and held to each recompute mode, for full recompute
// to each tier of the block checkpoints (device, host, NVMe), and the placement chosen there.
#pragma once

#include <cstddef>

#include "tierzero/profile/planner.hpp"

namespace tierzero::cli {

// The longest T (a multiple of `quantum`, at most `max_seq`) for which profile::plan(req) finds a
// fit, setting `seq` (which req's activation functions read) to each T tried; 0 when none fits.
// req.only_recompute and req.only_checkpoint_tier hold the search to a mode and a tier.
size_t longest_seq(profile::PlanRequest& req, size_t& seq, size_t max_seq, size_t quantum,
                   profile::Candidate* chosen);

// Prints the longest sequence overall, per recompute mode and per checkpoint tier with the chosen
// placements (a JSON line each); returns
// the command's exit code (1 when nothing fits at all).
int print_longest_seq(profile::PlanRequest& req, size_t& seq, size_t max_seq, size_t quantum);

}  // namespace tierzero::cli
