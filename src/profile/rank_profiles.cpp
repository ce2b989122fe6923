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

// The ranks in [0, ranks) other than `rank` whose profile lies beside rank 0's `base` under the
// trainer's naming (base, base.rank<r>), found by listing the directory once: a run's rank count
// comes from the file, and trying each name would cost a million lookups on a damaged one.
std::vector<int> sibling_ranks(const std::string& base, int ranks, int rank) {
  const fs::path base_path(base);
  const fs::path dir = base_path.has_parent_path() ? base_path.parent_path() : fs::path(".");
  const std::string name = base_path.filename().string(), prefix = name + ".rank";
  std::vector<int> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string n = entry.path().filename().string();
    long r = -1;
    if (n == name) {
      r = 0;
    } else if (n.size() > prefix.size() && n.size() <= prefix.size() + 7 &&
               n.compare(0, prefix.size(), prefix) == 0 &&
               n.find_first_not_of("0123456789", prefix.size()) == std::string::npos &&
               (n[prefix.size()] != '0' || n.size() == prefix.size() + 1)) {
      r = std::stol(n.substr(prefix.size()));
    }
    if (r > 0 || (r == 0 && n == name))
      if (r < ranks && r != rank) found.push_back(static_cast<int>(r));
  }
  std::sort(found.begin(), found.end());
  return found;
}

// "1, 2, 5" (the first 20 of them, then how many more).
std::string rank_list(const std::vector<int>& ranks) {
  std::string list;
  for (size_t i = 0; i < ranks.size() && i < 20; ++i)
    list += (list.empty() ? "" : ", ") + std::to_string(ranks[i]);
  if (ranks.size() > 20) list += " and " + std::to_string(ranks.size() - 20) + " more";
  return list;
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
    const std::string list = rank_list(out.missing);
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
      for (int r : sibling_ranks(base, profiles.front().run.ranks, profiles.front().run.rank)) {
        const std::string sibling = rank_profile_path(base, r);
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
