// `tierzero plan --longest-seq`: the longest sequence a model trains at with given budgets, by
// binary search over T with the estimator (the planner's fit test at each T), overall and with the
// block checkpoints held to each tier (device, host, NVMe), and the placement chosen there.
#pragma once

#include <cstddef>

#include "tierzero/profile/planner.hpp"

namespace tierzero::cli {

// The longest T (a multiple of `quantum`, at most `max_seq`) for which profile::plan(req) finds a
// fit, setting `seq` (which req's activation functions read) to each T tried; 0 when none fits.
// only_tier: req.only_checkpoint_tier for the search.
size_t longest_seq(profile::PlanRequest& req, size_t& seq, size_t max_seq, size_t quantum,
                   profile::Candidate* chosen);

// Prints the longest sequence overall and per checkpoint tier with the chosen placements; returns
// the command's exit code (1 when nothing fits at all).
int print_longest_seq(profile::PlanRequest& req, size_t& seq, size_t max_seq, size_t quantum);

}  // namespace tierzero::cli
