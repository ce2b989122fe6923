// Checked reads of a checkpoint's JSON fields (checkpoint_fields.hpp).
#include "checkpoint_fields.hpp"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "tierzero/core/error.hpp"

namespace tierzero::train::checkpoint_fields {

namespace {

const char* kDamaged = "the file is damaged or was edited; resume from another checkpoint";

std::string read_bounded(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  TZ_CHECK(f != nullptr,
           "checkpoint file '" + path + "' is missing or unreadable: " + std::strerror(errno),
           "resume from a complete checkpoint directory (DIR/step-N, or DIR with a 'latest' file)");
  std::string text;
  char buf[65536];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0 && text.size() <= kMaxJsonBytes)
    text.append(buf, n);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  TZ_CHECK(!failed, "reading checkpoint file '" + path + "' failed", "");
  TZ_CHECK(text.size() <= kMaxJsonBytes,
           "checkpoint file '" + path + "' is larger than " + std::to_string(kMaxJsonBytes >> 20) +
               " MiB, far more than any manifest",
           kDamaged);
  return text;
}

// nlohmann's message without its "[json.exception...] parse error at ..." preamble.
std::string parse_reason(const nlohmann::json::parse_error& e) {
  const std::string what = e.what();
  if (what.find("number overflow") != std::string::npos)
    return "a number too large to represent at byte " + std::to_string(e.byte);
  const size_t dash = what.rfind(" - ");
  return (dash == std::string::npos ? what : what.substr(dash + 3)) + " at byte " +
         std::to_string(e.byte);
}

}  // namespace

nlohmann::json read_json(const std::string& path) {
  const std::string text = read_bounded(path);
  // Nesting is bounded before the value is built: a deep one would recurse in its destructor.
  const nlohmann::json::parser_callback_t depth_limit =
      [&path](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
        TZ_CHECK(depth <= kMaxJsonDepth,
                 "checkpoint file '" + path + "' nests deeper than " +
                     std::to_string(kMaxJsonDepth) + " levels",
                 kDamaged);
        return true;
      };
  try {
    return nlohmann::json::parse(text, depth_limit);
  } catch (const nlohmann::json::parse_error& e) {
    TZ_THROW("checkpoint file '" + path + "' is not valid JSON (" + parse_reason(e) + ")",
             kDamaged);
  } catch (const nlohmann::json::exception& e) {  // 1e400: out_of_range, not a parse error
    const std::string what = e.what();
    const size_t at = what.find("number overflow parsing ");
    TZ_THROW("checkpoint file '" + path + "' is not valid JSON (" +
                 (at != std::string::npos
                      ? "a number too large to represent: " + what.substr(at + 24, 40)
                      : what) +
                 ")",
             kDamaged);
  }
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
