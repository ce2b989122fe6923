// Checked reads of a checkpoint's JSON fields (checkpoint_fields.hpp).
#include "checkpoint_fields.hpp"

#include <cmath>
#include <limits>

#include "tierzero/core/error.hpp"
#include "tierzero/core/input_file.hpp"
#include "tierzero/core/json_text.hpp"

namespace tierzero::train::checkpoint_fields {

namespace {

const char* kDamaged = "the file is damaged or was edited; resume from another checkpoint";

}  // namespace

nlohmann::json read_json(const std::string& path) {
  const std::string text = read_input_file(
      path, "checkpoint file",
      "resume from a complete checkpoint directory (DIR/step-N, or DIR with a 'latest' file)",
      kMaxJsonBytes);
  return parse_json_text(text, "checkpoint file '" + path + "'", kDamaged, false, kMaxJsonDepth);
}

std::string show(const nlohmann::json& value) {
  std::string s = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (s.size() > 48) s = s.substr(0, 45) + "...";
  return s;
}

Fields::Fields(const std::string& file, const nlohmann::json& object, std::string where)
    : file_(file), where_(std::move(where)), object_(&object) {
  if (!object.is_object())
    TZ_THROW("checkpoint file '" + file_ + "': " +
                 (where_.empty() ? std::string("the top level") : "field '" + where_ + "'") +
                 " is " + show(object) + "; expected a JSON object",
             kDamaged);
}

std::string Fields::path(const std::string& key) const {
  return where_.empty() ? key : where_ + "." + key;
}

void Fields::fail(const std::string& key, const std::string& value,
                  const std::string& expected) const {
  TZ_THROW("checkpoint file '" + file_ + "': field '" + path(key) + "' is " + value +
               "; expected " + expected,
           kDamaged);
}

const nlohmann::json& Fields::get(const char* key) const {
  const auto it = object_->find(key);
  if (it == object_->end()) fail(key, "missing", "it to be present");
  return *it;
}

int64_t Fields::integer(const char* key, int64_t lo, int64_t hi) const {
  return integer_value(get(key), key, lo, hi);
}

int64_t Fields::integer_value(const nlohmann::json& v, const std::string& key, int64_t lo,
                              int64_t hi) const {
  const std::string expected =
      "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  if (!v.is_number_integer()) fail(key, show(v), expected);
  if (v.is_number_unsigned() &&
      v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    fail(key, show(v), expected);
  const auto x = v.get<int64_t>();
  if (x < lo || x > hi) fail(key, std::to_string(x), expected);
  return x;
}

double Fields::number(const char* key, double lo, double hi) const {
  const nlohmann::json& v = get(key);
  const std::string expected = "a finite number in [" + show(lo) + ", " + show(hi) + "]";
  if (!v.is_number()) fail(key, show(v), expected);
  const auto x = v.get<double>();
  if (!std::isfinite(x) || x < lo || x > hi) fail(key, show(v), expected);
  return x;
}

std::string Fields::string(const char* key, size_t max_length) const {
  const nlohmann::json& v = get(key);
  const std::string expected =
      "a non-empty string of at most " + std::to_string(max_length) + " characters";
  if (!v.is_string()) fail(key, show(v), expected);
  const auto& s = v.get_ref<const std::string&>();
  if (s.empty() || s.size() > max_length) fail(key, show(v), expected);
  return s;
}

Fields Fields::object(const char* key) const {
  return Fields(file_, get(key), path(key));
}

const nlohmann::json& Fields::array(const char* key) const {
  const nlohmann::json& v = get(key);
  if (!v.is_array()) fail(key, show(v), "a JSON array");
  return v;
}

Fields Fields::element(const char* key, size_t i) const {
  return Fields(file_, array(key).at(i), path(key) + "[" + std::to_string(i) + "]");
}

}  // namespace tierzero::train::checkpoint_fields
