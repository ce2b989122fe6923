// The profiles of one multi-rank run, found and checked: `train --profile FILE` writes rank 0's
// profile to FILE and rank r's to FILE.rank<r> (rank_profile_path), and `tierzero report` reads
// them back together from a list of files, a directory, or any one rank's path (the others are
// found by that naming). Profiles of different runs are an error naming the file; a rank with no
// profile is a warning (the report then covers the ranks it has and says which are missing).
#pragma once

#include <string>
#include <vector>

#include "tierzero/profile/profile.hpp"

namespace tierzero::profile {

// Where rank `rank` of a run profiled to `rank0_path` writes its profile.
std::string rank_profile_path(const std::string& rank0_path, int rank);

struct RankProfiles {
  std::vector<Profile> profiles;      // one per rank found, by ascending rank
  std::vector<std::string> sources;   // the file each was read from (or a label)
  int ranks = 1;                      // the run's world size
  std::vector<int> missing;           // ranks with no profile
  std::vector<std::string> warnings;  // for the caller to show (missing ranks, no run id)
};

// Checks that the profiles belong to one run (same run id, world size, model, stage; each rank
// at most once and below the world size) and orders them by rank. Throws Error naming the source
// that does not fit.
RankProfiles check_rank_profiles(std::vector<Profile> profiles, std::vector<std::string> sources);

// Reads the profiles `paths` name: a file, several files, or a directory (every file in it that
// holds a TierZero profile; other files are skipped). A single file of a multi-rank run brings
// its sibling ranks' files when they exist. Throws Error on an unreadable or damaged profile
// (naming it) and on profiles of different runs.
RankProfiles read_rank_profiles(const std::vector<std::string>& paths);

}  // namespace tierzero::profile
