// Finding and checking one run's per-rank profiles. Sibling discovery follows the trainer's
// naming only (rank_profile_path), so a report never picks up an unrelated file by accident.
#include "tierzero/profile/rank_profiles.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tierzero/core/error.hpp"
#include "tierzero/profile/profile_json.hpp"

namespace tierzero::profile {

namespace fs = std::filesystem;

std::string rank_profile_path(const std::string& rank0_path, int rank) {
  return rank == 0 ? rank0_path : rank0_path + ".rank" + std::to_string(rank);
}

namespace {

std::string describe(const Profile& p) {
  return "run " + (p.run.run_id.empty() ? std::string("(no id)") : p.run.run_id) + ", " +
         std::to_string(p.run.ranks) + " rank(s), stage " + std::to_string(p.run.stage) + ", " +
         p.run.model;
}

// The rank-0 path a profile of rank `rank` read from `path` implies under the trainer's naming;
// "" when the name does not follow it.
std::string rank0_path_of(const std::string& path, int rank) {
  if (rank == 0) return path;
  const std::string suffix = ".rank" + std::to_string(rank);
  if (path.size() > suffix.size() &&
      path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0)
    return path.substr(0, path.size() - suffix.size());
  return "";
}

// Whether a file holds a TierZero profile, judged by its first bytes (a directory may hold the
// run's config, the report and other files beside the profiles).
bool looks_like_profile(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  char head[4096] = {};  // "format" sorts after "categories", near the start
  in.read(head, sizeof head);
  const std::string s(head, static_cast<size_t>(in.gcount()));
  return s.find(std::string("\"format\":\"") + kProfileFormat + "\"") != std::string::npos;
}

}  // namespace

RankProfiles check_rank_profiles(std::vector<Profile> profiles, std::vector<std::string> sources) {
  TZ_CHECK(!profiles.empty() && profiles.size() == sources.size(), "no profiles to report on",
           "pass the profile file(s) `train --profile` wrote");
  const Profile& first = profiles.front();
  const int ranks = first.run.ranks;
  TZ_CHECK(ranks >= 1,
           "profile '" + sources.front() + "' says the run had " + std::to_string(ranks) + " ranks",
           "the file is damaged; write it again");
  for (size_t i = 0; i < profiles.size(); ++i) {
    const RunInfo& r = profiles[i].run;
    const bool same = r.run_id == first.run.run_id && r.ranks == ranks &&
                      r.stage == first.run.stage && r.model == first.run.model &&
                      r.parameters == first.run.parameters;
    TZ_CHECK(same,
             "profile '" + sources[i] + "' (" + describe(profiles[i]) +
                 ") is not of the same run as '" + sources.front() + "' (" + describe(first) + ")",
             "pass the profiles of one run only (its FILE and FILE.rank<r>)");
    TZ_CHECK(r.rank >= 0 && r.rank < ranks,
             "profile '" + sources[i] + "' is rank " + std::to_string(r.rank) + " of a " +
                 std::to_string(ranks) + "-rank run",
             "the file is damaged; write it again");
  }
  std::vector<size_t> order(profiles.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return profiles[a].run.rank < profiles[b].run.rank; });
  RankProfiles out;
  out.ranks = ranks;
  for (size_t k = 0; k < order.size(); ++k) {
    const size_t i = order[k];
    // Compared with the one kept last (already moved into `out`).
    TZ_CHECK(k == 0 || out.profiles.back().run.rank != profiles[i].run.rank,
             "profiles '" + (k ? out.sources.back() : std::string()) + "' and '" + sources[i] +
                 "' are both rank " + std::to_string(profiles[i].run.rank) + " of the run",
             "pass each rank's profile once");
    out.profiles.push_back(std::move(profiles[i]));
    out.sources.push_back(std::move(sources[i]));
  }
  size_t next = 0;
  for (int r = 0; r < ranks; ++r) {
    if (next < out.profiles.size() && out.profiles[next].run.rank == r)
      ++next;
    else
      out.missing.push_back(r);
  }
  if (!out.missing.empty()) {
    std::string list;
    for (int r : out.missing) list += (list.empty() ? "" : ", ") + std::to_string(r);
    out.warnings.push_back(std::to_string(out.missing.size()) + " of the run's " +
                           std::to_string(ranks) + " ranks have no profile here (rank(s) " + list +
                           "); the report covers the others");
  }
  if (out.profiles.size() > 1 && out.profiles.front().run.run_id.empty())
    out.warnings.push_back(
        "these profiles carry no run id (an older build wrote them): only the world size, "
        "model and stage were checked to match");
  return out;
}

RankProfiles read_rank_profiles(const std::vector<std::string>& paths) {
  TZ_CHECK(!paths.empty(), "no profile given", "pass the profile file(s) `train --profile` wrote");
  std::vector<std::string> files;
  std::vector<std::string> skipped;
  for (const std::string& path : paths) {
    std::error_code ec;
    if (fs::is_directory(path, ec)) {
      std::vector<std::string> found;
      for (const auto& entry : fs::directory_iterator(path, ec)) {
        if (!entry.is_regular_file(ec)) continue;
        if (looks_like_profile(entry.path()))
          found.push_back(entry.path().string());
        else
          skipped.push_back(entry.path().filename().string());
      }
      TZ_CHECK(!ec, "cannot list directory '" + path + "': " + ec.message(),
               "check the path and its permissions");
      TZ_CHECK(!found.empty(), "directory '" + path + "' holds no TierZero profile",
               "pass the directory `train --profile` wrote into, or the profile files");
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else {
      files.push_back(path);
    }
  }
  std::vector<Profile> profiles;
  for (const std::string& f : files) profiles.push_back(read_profile(f));
  // One file of a multi-rank run: its siblings, where the trainer's naming finds them.
  if (paths.size() == 1 && files.size() == 1 && profiles.front().run.ranks > 1) {
    const std::string base = rank0_path_of(files.front(), profiles.front().run.rank);
    if (!base.empty())
      for (int r = 0; r < profiles.front().run.ranks; ++r) {
        if (r == profiles.front().run.rank) continue;
        const std::string sibling = rank_profile_path(base, r);
        std::error_code ec;
        if (!fs::exists(sibling, ec)) continue;
        profiles.push_back(read_profile(sibling));
        files.push_back(sibling);
      }
  }
  RankProfiles out = check_rank_profiles(std::move(profiles), std::move(files));
  if (!skipped.empty() && !out.missing.empty()) {
    std::string list;
    for (const auto& s : skipped) list += (list.empty() ? "" : ", ") + s;
    out.warnings.push_back("skipped files that are not TierZero profiles: " + list);
  }
  return out;
}

}  // namespace tierzero::profile
