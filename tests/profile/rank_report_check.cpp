// Checks a multi-rank `tierzero report` against the profiles it was made from (for
// run_real_report.sh): usage: rank_report_check REPORT.html TRACE.json PROFILE...
// Every rank's figures in the page's tz-ranks data must equal what its own profile holds (the
// highest per-step peak of each tier and category, the mean of its steady steps' times), the
// slowest rank and the step-time imbalance must follow from those, and the trace must hold one
// process per rank with activity slices. Prints each comparison; exits 1 on any mismatch.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "tierzero/profile/profile_json.hpp"

using namespace tierzero;
using namespace tierzero::profile;

namespace {

int failures = 0;

void expect(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "ok  " : "FAIL", what.c_str());
  if (!ok) ++failures;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The JSON of <script type="application/json" id=tz-ranks> ("<\/" undone).
nlohmann::json ranks_data(const std::string& html) {
  const std::string open = "<script type=\"application/json\" id=tz-ranks>";
  const size_t at = html.find(open);
  if (at == std::string::npos) return nullptr;
  const size_t end = html.find("</script>", at);
  std::string text = html.substr(at + open.size(), end - at - open.size());
  for (size_t i; (i = text.find("<\\/")) != std::string::npos;) text.replace(i, 3, "</");
  return nlohmann::json::parse(text);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s REPORT.html TRACE.json PROFILE...\n", argv[0]);
    return 2;
  }
  try {
    const nlohmann::json data = ranks_data(read_text(argv[1]));
    expect(data.is_object(), "the page holds the ranks' figures");
    if (!data.is_object()) return 1;
    std::map<int, nlohmann::json> rows;
    for (const auto& row : data.at("per_rank")) rows[row.at("rank").get<int>()] = row;
    const int n = argc - 3;
    expect(static_cast<int>(rows.size()) == n, "the page has " + std::to_string(rows.size()) +
                                                   " ranks, " + std::to_string(n) +
                                                   " profiles given");
    double sum = 0.0, top = -1.0;
    int slowest = -1;
    for (int i = 3; i < argc; ++i) {
      const Profile p = read_profile(argv[i]);
      const int r = p.run.rank;
      expect(rows.count(r) == 1, "rank " + std::to_string(r) + " (" + argv[i] + ") is in the page");
      if (!rows.count(r)) continue;
      const nlohmann::json& row = rows[r];
      // The profile's own numbers, computed here from its steps.
      for (size_t t = 0; t < kNumTiers; ++t) {
        const char* tier = tier_name(static_cast<Tier>(t));
        size_t tier_peak = 0;
        for (const auto& s : p.steps) tier_peak = std::max(tier_peak, s.tier_peak[t].bytes);
        const size_t shown = row["peaks"][tier]["peak"].get<size_t>();
        expect(shown == tier_peak, "rank " + std::to_string(r) + " " + tier + " peak: profile " +
                                       std::to_string(tier_peak) + ", report " +
                                       std::to_string(shown));
        for (size_t k = 0; k < kNumCategories; ++k) {
          const char* cat = category_name(static_cast<Category>(k));
          size_t peak = 0;
          for (const auto& s : p.steps) peak = std::max(peak, s.peak[t][k].bytes);
          const size_t got = row["peaks"][tier][cat].get<size_t>();
          if (peak != got || peak > 0)
            expect(peak == got, "rank " + std::to_string(r) + " " + tier + "/" + cat +
                                    " peak: profile " + std::to_string(peak) + ", report " +
                                    std::to_string(got));
        }
      }
      const size_t first = p.steps.size() > 1 ? 1 : 0;
      double mean = 0.0;
      for (size_t s = first; s < p.steps.size(); ++s) mean += p.steps[s].counters.step_s;
      mean /= static_cast<double>(p.steps.size() - first);
      const double shown = row["mean_step_s"].get<double>();
      char line[160];
      std::snprintf(line, sizeof line, "rank %d mean step: profile %.9f s, report %.9f s", r, mean,
                    shown);
      expect(std::fabs(shown - mean) <= 1e-12 * std::max(1.0, mean), line);
      expect(row["steps"].get<size_t>() == p.steps.size(), "rank " + std::to_string(r) + " steps");
      sum += mean;
      if (mean > top) {
        top = mean;
        slowest = r;
      }
    }
    expect(data["imbalance"]["slowest_rank"].get<int>() == slowest,
           "slowest rank: profiles say " + std::to_string(slowest) + ", report " +
               data["imbalance"]["slowest_rank"].dump());
    const double imbalance = top / (sum / n), shown = data["imbalance"]["step_time"].get<double>();
    char line[128];
    std::snprintf(line, sizeof line, "step-time max/mean: profiles %.6f, report %.6f", imbalance,
                  shown);
    expect(std::fabs(imbalance - shown) <= 1e-9, line);

    std::ifstream trace_in(argv[2]);
    const nlohmann::json trace = nlohmann::json::parse(trace_in);
    std::map<int64_t, size_t> activity_slices;
    std::map<int64_t, std::map<int64_t, std::string>> threads;
    std::map<int64_t, std::string> processes;
    for (const auto& e : trace.at("traceEvents")) {
      const int64_t pid = e.at("pid").get<int64_t>();
      if (e["ph"] == "M" && e["name"] == "process_name") processes[pid] = e["args"]["name"];
      if (e["ph"] == "X" && e["cat"] != "step" && e["cat"] != "phase") ++activity_slices[pid];
    }
    for (const auto& [r, row] : rows) {
      expect(processes[r] == "rank " + std::to_string(r) && activity_slices[r] > 0,
             "the trace has rank " + std::to_string(r) + " as a process with " +
                 std::to_string(activity_slices[r]) + " activity slices");
    }
    expect(static_cast<int>(processes.size()) == n,
           "the trace has " + std::to_string(processes.size()) + " processes");
  } catch (const std::exception& e) {
    std::printf("FAIL %s\n", e.what());
    return 1;
  }
  std::printf("rank_report_check: %s\n", failures ? "FAILED" : "OK");
  return failures ? 1 : 0;
}
