// Reading a checkpoint's JSON files with every field's type and range checked. A file is read
// whole but bounded in size and nesting depth (a hostile file must not exhaust memory or the
// stack), and every error names the file, the field's path (`blocks[3].offset`) and what was
// expected, so a damaged or forged checkpoint says exactly what is wrong.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace tierzero::train::checkpoint_fields {

constexpr size_t kMaxJsonBytes = size_t{64} << 20;  // far above any real manifest (a few MB)
constexpr size_t kMaxJsonDepth = 32;                // ours nest 4 deep

// The parsed contents of one JSON file; Error naming the file when it is missing, too large,
// nested too deep or not JSON (a number too large to represent is said so).
nlohmann::json read_json(const std::string& path);

// One JSON object of a file, at `where` (empty: the file's top level).
class Fields {
 public:
  // Error unless `object` is a JSON object.
  Fields(const std::string& file, const nlohmann::json& object, std::string where = "");
  const std::string& file() const { return file_; }
  bool has(const char* key) const { return object_->contains(key); }
  const nlohmann::json& get(const char* key) const;  // present
  // An integer (not a fraction, a string or a number beyond int64) in [lo, hi].
  int64_t integer(const char* key, int64_t lo, int64_t hi) const;
  // The same for a value `v` the caller found (named `key` in errors), e.g. an array's element.
  int64_t integer_value(const nlohmann::json& v, const std::string& key, int64_t lo,
                        int64_t hi) const;
  double number(const char* key, double lo, double hi) const;          // finite, in [lo, hi]
  std::string string(const char* key, size_t max_length = 256) const;  // non-empty
  Fields object(const char* key) const;
  const nlohmann::json& array(const char* key) const;
  // Element i of `key` (an array), which must be an object.
  Fields element(const char* key, size_t i) const;
  std::string path(const std::string& key) const;  // "blocks[3].offset"
  // Throws Error: field `key` is `value`, expected `expected`.
  [[noreturn]] void fail(const std::string& key, const std::string& value,
                         const std::string& expected) const;

 private:
  std::string file_, where_;
  const nlohmann::json* object_;
};

// A short rendering of a JSON value for an error message.
std::string show(const nlohmann::json& value);

}  // namespace tierzero::train::checkpoint_fields
