// The benchmarks' result lines (results.hpp).
#include "tierzero/bench/results.hpp"

#include <cmath>
#include <cstdio>

namespace tierzero::bench {

double round_to(double x, int digits) {
  const double scale = std::pow(10.0, digits);
  return std::round(x * scale) / scale;
}

nlohmann::ordered_json bench_result(const std::string& bench, double value, const std::string& unit,
                                    const std::string& baseline, double baseline_value,
                                    double ratio) {
  nlohmann::ordered_json j;
  j["bench"] = bench;
  j["value"] = value;
  j["unit"] = unit;
  j["baseline"] = baseline;
  j["baseline_value"] = baseline_value;
  j["ratio"] = round_to(ratio, 4);
  return j;
}

void print_result(const nlohmann::ordered_json& j) {
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

void BenchReport::emit(const nlohmann::ordered_json& j) {
  print_result(j);
  results.push_back(j);
}

void BenchReport::append(const BenchReport& other) {
  results.insert(results.end(), other.results.begin(), other.results.end());
  passed = passed && other.passed;
}

}  // namespace tierzero::bench
