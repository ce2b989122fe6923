// The benchmarks' result lines: one JSON object per result on stdout, built with nlohmann::json
// (never by formatting text, so names and non-finite numbers cannot break the line: NaN and
// infinity are written as null). Every line starts with bench, value, unit, baseline,
// baseline_value and ratio; each benchmark appends its own fields.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tierzero::bench {

// x rounded to `digits` decimals: the double nearest that decimal, so that the JSON is short.
double round_to(double x, int digits);
// The fields every benchmark result line starts with (ratio rounded to 4 decimals).
nlohmann::ordered_json bench_result(const std::string& bench, double value, const std::string& unit,
                                    const std::string& baseline, double baseline_value,
                                    double ratio);
// One result line on stdout, flushed.
void print_result(const nlohmann::ordered_json& j);

// What a benchmark reports besides its table: the result lines it printed, in order, and whether
// every result passed its own check (a benchmark whose checks throw leaves it true).
struct BenchReport {
  std::vector<nlohmann::ordered_json> results;
  bool passed = true;

  // Prints j (print_result) and keeps it.
  void emit(const nlohmann::ordered_json& j);
  // `other`'s results after ours; passed only if both passed.
  void append(const BenchReport& other);
  // The command's exit status: 0, or 1 when a result failed its check.
  int exit_code() const { return passed ? 0 : 1; }
};

}  // namespace tierzero::bench
