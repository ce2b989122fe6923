// The ranks of a job agree on their run's settings (run_settings.hpp) before anything that
// depends on them: a fixed-size all-gather of each rank's settings digest first, so that ranks
// launched differently cannot hang or truncate each other there; only when the digests differ,
// the texts of rank 0 and of the lowest differing rank, each sent as its length and then its
// bytes, so every rank names the same first differing setting and refuses.
#pragma once

#include <string>
#include <vector>

#include "tierzero/comm/communicator.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/train/run_settings.hpp"

namespace tierzero::train {

// Collective over `world` (every rank calls it, before any other collective whose shape depends
// on the settings): returns when every rank's settings equal rank 0's, else throws
// SameOnEveryRankError (error_report.hpp) on every rank, naming the first setting where the lowest
// differing rank differs from rank 0 and both values, e.g. "tierzero.steps (--steps) is 3 on rank 0
// but 4 on rank 1".
void require_ranks_agree(const RunSettings& mine, comm::Communicator& world);

// Collective over `group` (null: one rank): whether each rank `failed`, (ranks) 1 where it did.
std::vector<float> rank_failures(bool failed, int rank, comm::Communicator* group);

// Collective over `group` (null: one rank): returns when no rank has a problem (an empty
// `my_problem` on every rank); else throws SameOnEveryRankError on every rank, reported by the
// lowest failing rank with its own message, so that a failure every rank meets alike (a
// checkpoint that does not match the run, an output that cannot be written) is said once, and
// one only some ranks meet still ends them all, none left in a collective.
void throw_if_any_rank_failed(const std::string& my_problem, int rank, comm::Communicator* group);

}  // namespace tierzero::train
