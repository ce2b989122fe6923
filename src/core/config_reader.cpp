// Typed JSON reads with full-path error messages and "did you mean" suggestions.
#include "tierzero/core/config_reader.hpp"

#include <algorithm>
#include <cmath>

#include "tierzero/core/error.hpp"

namespace tierzero {

namespace {

std::string type_of(const nlohmann::json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer() || v.is_number_unsigned()) return "an integer (" + v.dump() + ")";
  if (v.is_number_float()) return "a number (" + v.dump() + ")";
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    return "a string (\"" + (s.size() <= 40 ? s : s.substr(0, 40) + "...") + "\")";
  }
  if (v.is_array()) return "an array";
  return "an object";
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string format_number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

}  // namespace

ConfigReader::ConfigReader(const nlohmann::json& object, std::string source, std::string path)
    : object_(object), source_(std::move(source)), path_(std::move(path)) {
  if (!object_.is_object())
    TZ_THROW("config error in " + source_ + ": '" + (path_.empty() ? "<root>" : path_) +
                 "' must be an object, got " + type_of(object_),
             "see docs/config.md");
}

const nlohmann::json& ConfigReader::empty_object() {
  static const nlohmann::json empty = nlohmann::json::object();
  return empty;
}

std::string ConfigReader::key_path(const std::string& key) const {
  return path_.empty() ? key : path_ + "." + key;
}

void ConfigReader::fail(const std::string& key, const std::string& problem) const {
  TZ_THROW("config error in " + source_ + ": key '" + key_path(key) + "' " + problem,
           "see docs/config.md for every key, its type and its range");
}

bool ConfigReader::has(const std::string& key) const {
  return object_.contains(key);
}

bool ConfigReader::is_null(const std::string& key) const {
  auto it = object_.find(key);
  return it != object_.end() && it->is_null();
}

const nlohmann::json* ConfigReader::find(const std::string& key) {
  seen_.insert(key);
  auto it = object_.find(key);
  return it == object_.end() ? nullptr : &*it;
}

int64_t ConfigReader::get_int(const std::string& key, int64_t fallback, int64_t min, int64_t max) {
  const nlohmann::json* v = find(key);
  if (!v) return fallback;
  int64_t x = 0;
  if (v->is_number_integer() || v->is_number_unsigned()) {
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      fail(key, "is out of range");
    x = v->get<int64_t>();
  } else if (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>() &&
             std::fabs(v->get<double>()) < 9.0e18) {
    x = static_cast<int64_t>(v->get<double>());  // 1e6 written as a float is still an integer
  } else {
    fail(key, "must be an integer, got " + type_of(*v));
  }
  if (x < min || x > max)
    fail(key, "= " + std::to_string(x) + " is out of range [" + std::to_string(min) + ", " +
                  (max == std::numeric_limits<int64_t>::max() ? "inf" : std::to_string(max)) + "]");
  return x;
}

double ConfigReader::get_number(const std::string& key, double fallback, double min, double max,
                                bool min_exclusive) {
  const nlohmann::json* v = find(key);
  if (!v) return fallback;
  if (!v->is_number()) fail(key, "must be a number, got " + type_of(*v));
  double x = v->get<double>();
  bool below = min_exclusive ? !(x > min) : !(x >= min);
  if (below || !(x <= max) || std::isnan(x))
    fail(key, "= " + format_number(x) + " is out of range " + (min_exclusive ? "(" : "[") +
                  format_number(min) + ", " + format_number(max) + "]");
  return x;
}

bool ConfigReader::get_bool(const std::string& key, bool fallback) {
  const nlohmann::json* v = find(key);
  if (!v) return fallback;
  if (!v->is_boolean()) fail(key, "must be true or false, got " + type_of(*v));
  return v->get<bool>();
}

std::string ConfigReader::get_string(const std::string& key, const std::string& fallback,
                                     const std::vector<std::string>& allowed) {
  const nlohmann::json* v = find(key);
  if (!v) return fallback;
  if (!v->is_string()) fail(key, "must be a string, got " + type_of(*v));
  std::string s = v->get<std::string>();
  if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), s) == allowed.end()) {
    std::string list;
    for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
    fail(key, "= \"" + s + "\" is not one of: " + list);
  }
  return s;
}

std::vector<double> ConfigReader::get_numbers(const std::string& key,
                                              const std::vector<double>& fallback, size_t count,
                                              double min, double max) {
  const nlohmann::json* v = find(key);
  if (!v) return fallback;
  if (!v->is_array() || v->size() != count)
    fail(key, "must be an array of " + std::to_string(count) + " numbers, got " + type_of(*v));
  std::vector<double> out;
  for (size_t i = 0; i < count; ++i) {
    const auto& e = (*v)[i];
    if (!e.is_number())
      fail(key + "[" + std::to_string(i) + "]", "must be a number, got " + type_of(e));
    double x = e.get<double>();
    if (!(x >= min && x <= max))
      fail(key + "[" + std::to_string(i) + "]", "= " + format_number(x) + " is out of range [" +
                                                    format_number(min) + ", " + format_number(max) +
                                                    "]");
    out.push_back(x);
  }
  return out;
}

const nlohmann::json* ConfigReader::get_json(const std::string& key) {
  return find(key);
}

std::vector<std::string> ConfigReader::keys() const {
  std::vector<std::string> out;
  for (const auto& [key, value] : object_.items()) out.push_back(key);
  return out;
}

ConfigReader ConfigReader::child(const std::string& key) {
  const nlohmann::json* v = find(key);
  if (!v) return ConfigReader(empty_object(), source_, key_path(key));
  if (!v->is_object()) fail(key, "must be an object, got " + type_of(*v));
  return ConfigReader(*v, source_, key_path(key));
}

void ConfigReader::accept(const std::vector<std::string>& keys) {
  for (const auto& k : keys) seen_.insert(k);
}

void ConfigReader::finish() const {
  for (const auto& [key, value] : object_.items()) {
    if (seen_.count(key)) continue;
    std::string best;
    size_t best_d = 4;
    for (const auto& s : seen_) {
      size_t d = edit_distance(key, s);
      if (d < best_d) {
        best_d = d;
        best = s;
      }
    }
    TZ_THROW("config error in " + source_ + ": unknown key '" + key_path(key) + "'" +
                 (best.empty() ? "" : " (did you mean '" + key_path(best) + "'?)"),
             "see docs/config.md for the keys TierZero reads");
  }
}

}  // namespace tierzero
