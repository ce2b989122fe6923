// ConfigReader: typed, range-checked reads from a JSON object, remembering which keys were read,
// so that any key nobody asked for is reported with its full path ("zero_optimization.stag") and a
// suggestion. This is what lets a DeepSpeed config be read unchanged while typos still fail loudly.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

namespace tierzero {

class ConfigReader {
 public:
  // `source` names the file (or "defaults") in messages; `path` is this object's dotted path.
  ConfigReader(const nlohmann::json& object, std::string source, std::string path = {});

  bool has(const std::string& key) const;
  // Present with the value null (DeepSpeed writes null for "unset"); does not mark it read.
  bool is_null(const std::string& key) const;
  int64_t get_int(const std::string& key, int64_t fallback,
                  int64_t min = std::numeric_limits<int64_t>::min(),
                  int64_t max = std::numeric_limits<int64_t>::max());
  double get_number(const std::string& key, double fallback,
                    double min = -std::numeric_limits<double>::infinity(),
                    double max = std::numeric_limits<double>::infinity(),
                    bool min_exclusive = false);
  bool get_bool(const std::string& key, bool fallback);
  std::string get_string(const std::string& key, const std::string& fallback,
                         const std::vector<std::string>& allowed = {});
  std::vector<double> get_numbers(const std::string& key, const std::vector<double>& fallback,
                                  size_t count, double min, double max);
  // The value as it is (marked read), for keys of any type; null if absent.
  const nlohmann::json* get_json(const std::string& key);
  // The keys this object holds, read or not.
  std::vector<std::string> keys() const;
  // A nested object (an empty one if absent). Finish it before finishing this reader.
  ConfigReader child(const std::string& key);
  // Keys that are valid (DeepSpeed knows them) and that, at any value, change nothing TierZero
  // does (e.g. the choice between implementations of the same optimizer).
  void accept(const std::vector<std::string>& keys);
  // Throws Error for the first key that was never read or accepted.
  void finish() const;

  std::string key_path(const std::string& key) const;
  [[noreturn]] void fail(const std::string& key, const std::string& problem) const;

 private:
  const nlohmann::json* find(const std::string& key);
  static const nlohmann::json& empty_object();

  const nlohmann::json& object_;
  std::string source_;
  std::string path_;
  std::set<std::string> seen_;
};

}  // namespace tierzero
